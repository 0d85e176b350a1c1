//! The PR CI workflow cannot run here, so these tests check it: `actionlint` accepts it, its jobs
//! run the README's test command (`scripts/test.sh`, which `.ci/run` runs whole) in its stages —
//! lint once, archive once, the archive's tests (the lifecycle and faults scenarios among them) over a matrix
//! of jobs that split the default run between them — it uploads the JUnit report always and
//! the lab's evidence on failure, and its cache keys hash what their caches hold.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml_ng::Value;

const TEST_COMMAND: &str = "scripts/test.sh";
const WORKFLOW: &str = ".github/workflows/ci.yml";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

fn read(relative: &str) -> String {
    let path = repo_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()))
}

/// `.config/nextest.toml`, parsed.
fn nextest_config() -> toml::Table {
    toml::from_str(&read(".config/nextest.toml")).expect(".config/nextest.toml is TOML")
}

/// The `default-filter` of a profile in `.config/nextest.toml`.
fn nextest_default_filter(profile: &str) -> String {
    nextest_config()["profile"][profile]["default-filter"]
        .as_str()
        .unwrap_or_else(|| panic!(".config/nextest.toml: [profile.{profile}] has no default-filter"))
        .to_owned()
}

fn workflow() -> Value {
    serde_yaml_ng::from_str(&read(WORKFLOW)).unwrap_or_else(|err| panic!("{WORKFLOW} is not YAML: {err}"))
}

/// Every step of every job, with the job's name.
fn steps(workflow: &Value) -> Vec<(String, Value)> {
    let jobs = workflow["jobs"]
        .as_mapping()
        .unwrap_or_else(|| panic!("{WORKFLOW}: no `jobs` mapping"));
    jobs.iter()
        .flat_map(|(name, job)| {
            let name = name.as_str().unwrap_or_default().to_owned();
            let steps = job["steps"].as_sequence().cloned().unwrap_or_default();
            steps.into_iter().map(move |step| (name.clone(), step))
        })
        .collect()
}

/// The shell lines of a `run:` script, without blank lines and comments.
fn command_lines(script: &str) -> Vec<&str> {
    script
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

/// Whether a shell line invokes `command` (as `command`, `./command` or `exec command`, with arguments).
fn invokes(line: &str, command: &str) -> bool {
    let line = line.strip_prefix("exec ").unwrap_or(line).trim_start();
    let line = line.strip_prefix("./").unwrap_or(line);
    line == command || line.starts_with(&format!("{command} "))
}

fn actionlint() -> PathBuf {
    let cache = harness::cache::Cache::open().expect("the lab cache directory");
    let in_cache = cache.root().join("tools/bin/actionlint");
    if in_cache.is_file() {
        return in_cache;
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("actionlint"))
        .find(|candidate| candidate.is_file());
    on_path.unwrap_or_else(|| {
        panic!(
            "actionlint is missing (looked at {} and on PATH); install it with `scripts/setup.sh` \
             (or `scripts/install-actionlint.sh`)",
            in_cache.display()
        )
    })
}

#[test]
fn workflow_passes_actionlint() {
    let output = agent::exec::run_unchecked(
        Command::new(actionlint())
            .args(["-no-color", WORKFLOW])
            .current_dir(repo_root()),
    )
    .expect("running actionlint");
    assert!(
        output.status.success(),
        "actionlint rejects {WORKFLOW}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `run:` lines of the workflow that invoke the test command, with their job.
fn test_command_runs() -> Vec<(String, String)> {
    steps(&workflow())
        .into_iter()
        .flat_map(|(job, step)| {
            let run = step["run"].as_str().unwrap_or_default().to_owned();
            command_lines(&run)
                .into_iter()
                .filter(|l| invokes(l, TEST_COMMAND))
                .map(|l| (job.clone(), l.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_workflow_runs_the_readme_test_command_in_its_three_stages() {
    let readme = read("README.md");
    assert!(
        readme.contains(&format!("`{TEST_COMMAND}`")),
        "README.md does not name `{TEST_COMMAND}`"
    );
    let runs = test_command_runs();
    let with_stage = |stage: &str| -> Vec<&(String, String)> {
        runs.iter()
            .filter(|(_, l)| {
                l.starts_with(&format!("{TEST_COMMAND} --stage {stage} "))
                    || *l == format!("{TEST_COMMAND} --stage {stage}")
            })
            .collect()
    };
    assert_eq!(
        runs.len(),
        3,
        "expected the lint, archive and run stages of {TEST_COMMAND}, one step each: {runs:?}"
    );
    let (lint, archive, run) = (with_stage("lint"), with_stage("archive"), with_stage("run"));
    assert_eq!((lint.len(), archive.len(), run.len()), (1, 1, 1), "{runs:?}");
    // The run stage takes the archive the archive stage wrote, one share of it per matrix entry.
    let archive_file = archive[0]
        .1
        .split_whitespace()
        .nth(3)
        .expect("the archive stage names its file");
    let run_line = &run[0].1;
    assert_eq!(
        run_line.split_whitespace().nth(3),
        Some(archive_file),
        "{run_line}"
    );
    // Each matrix entry's filterset (`-E`, which nextest intersects with the default filter).
    assert!(run_line.ends_with("-E \"$FILTER\""), "{run_line}");
    let jobs = workflow()["jobs"].clone();
    let run_job = &jobs[run[0].0.as_str()];
    let run_step = run_job["steps"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|step| {
            step["run"]
                .as_str()
                .is_some_and(|r| r.contains(run_line.as_str()))
        })
        .expect("the run stage's step");
    assert_eq!(
        run_step["env"]["FILTER"].as_str(),
        Some("${{ matrix.filter }}"),
        "the run stage's FILTER is not the matrix entry's filter: {run_step:?}"
    );
    // The default run (what `.ci/run` runs, and so the union of the jobs) holds the node's life
    // and its faults: only the guest tests (run inside a lab VM) are left out.
    let default_filter = nextest_default_filter("default");
    for binary in ["lifecycle", "daemon", "manual_bootstrap", "faults"] {
        assert!(
            !default_filter.contains(&format!("binary({binary})")),
            "the default run leaves out the {binary} scenarios: {default_filter}"
        );
    }
    let needs = &run_job["needs"];
    let archive_job = Value::String(archive[0].0.clone());
    assert!(
        needs == &archive_job || needs.as_sequence().is_some_and(|n| n.contains(&archive_job)),
        "the run stage's job does not wait for the archive's job: needs {needs:?}"
    );
    assert_ne!(lint[0].0, archive[0].0, "lint and the build run in parallel jobs");
}

#[test]
fn the_test_script_has_each_stage() {
    let script = read(TEST_COMMAND);
    for needle in [
        "--stage lint",
        "--stage archive FILE",
        "--stage run FILE",
        "cargo nextest archive --workspace --locked --archive-file \"$archive\"",
        "cargo nextest run --archive-file \"$archive\"",
    ] {
        assert!(script.contains(needle), "{TEST_COMMAND} lacks {needle:?}");
    }
}

#[test]
fn ci_run_calls_the_test_command() {
    let script = read(".ci/run");
    assert!(
        command_lines(&script)
            .iter()
            .any(|line| invokes(line, TEST_COMMAND)),
        ".ci/run does not call {TEST_COMMAND}:\n{script}"
    );
}

#[test]
fn the_workflow_runs_no_cargo_line_of_its_own_and_the_script_lints() {
    let test_script = read(TEST_COMMAND);
    let script_lines = command_lines(&test_script);
    let mut cargo_lines = 0;
    for (job, step) in steps(&workflow()) {
        for line in step["run"].as_str().map(command_lines).unwrap_or_default() {
            if line.starts_with("cargo ") {
                cargo_lines += 1;
                assert!(
                    script_lines.contains(&line),
                    "job {job}: `{line}` is not a command of {TEST_COMMAND}; CI must run what .ci/run runs"
                );
            }
        }
    }
    // Format and clippy run through the test command's lint stage, not as lines of their own.
    assert_eq!(
        cargo_lines, 0,
        "{WORKFLOW} runs cargo itself; it should run {TEST_COMMAND}'s stages"
    );
    assert!(
        script_lines.contains(&"cargo fmt --all -- --check"),
        "{TEST_COMMAND} does not check formatting"
    );
    assert!(
        script_lines
            .iter()
            .any(|l| l.starts_with("cargo clippy") && l.ends_with("-- -D warnings")),
        "{TEST_COMMAND} does not run clippy with warnings denied"
    );
}

/// The test jobs' matrix entries as (slug, filterset), in the workflow's order.
fn test_job_filters() -> Vec<(String, String)> {
    let (job, _) = test_command_runs()
        .into_iter()
        .find(|(_, line)| line.starts_with(&format!("{TEST_COMMAND} --stage run ")))
        .expect("the run stage's step");
    workflow()["jobs"][job.as_str()]["strategy"]["matrix"]["include"]
        .as_sequence()
        .unwrap_or_else(|| panic!("{WORKFLOW}: the job {job} has no matrix `include`"))
        .iter()
        .map(|entry| {
            let slug = entry["slug"].as_str().unwrap_or_default().to_owned();
            let filter = entry["filter"]
                .as_str()
                .unwrap_or_else(|| panic!("{WORKFLOW}: the test job {slug:?} has no `filter`"));
            (slug, filter.to_owned())
        })
        .collect()
}

/// A filterset without its whitespace, to compare two spellings of one expression.
fn compact(filter: &str) -> String {
    filter.split_whitespace().collect()
}

/// The arguments of each `name(...)` call in a filterset (`binary`, `test`; none nest parentheses).
fn matcher_arguments<'a>(filter: &'a str, name: &str) -> Vec<&'a str> {
    let opening = format!("{name}(");
    let mut found = Vec::new();
    let mut rest = filter;
    while let Some(at) = rest.find(&opening) {
        // `binary(` inside `binary_id(` or `test(` inside another word are not this matcher.
        let word_start = at == 0 || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let after = &rest[at + opening.len()..];
        let end = after.find(')').expect("a matcher's closing parenthesis");
        if word_start {
            found.push(&after[..end]);
        }
        rest = &after[end..];
    }
    found
}

/// Every integration test binary of the workspace's packages, as (name, its sources' text): a
/// `tests/<name>.rs` file, or a `tests/<name>/` directory with a `main.rs` and its modules.
fn test_sources() -> Vec<(String, String)> {
    ["agent", "harness", "scenarios"]
        .iter()
        .flat_map(|package| test_binaries(&repo_root().join(package).join("tests")))
        .map(|(name, files)| {
            let text = files
                .iter()
                .map(|file| std::fs::read_to_string(file).expect("a test source"))
                .collect::<Vec<_>>()
                .join("\n");
            (name, text)
        })
        .collect()
}

/// The test binaries under `dir` (a package's `tests/`), each with its source files.
fn test_binaries(dir: &std::path::Path) -> Vec<(String, Vec<std::path::PathBuf>)> {
    let rust_files = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "rs"))
            .collect();
        files.sort();
        files
    };
    let mut binaries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter_map(|path| {
            let stem = path.file_stem()?.to_string_lossy().into_owned();
            if path.is_dir() && path.join("main.rs").is_file() {
                Some((stem, rust_files(&path)))
            } else if path.extension().is_some_and(|e| e == "rs") {
                Some((stem, vec![path]))
            } else {
                None
            }
        })
        .collect();
    binaries.sort();
    binaries
}

/// Why a `binary(...)` or `test(...)` matcher of a test job names nothing in the repository, if
/// it does not: a renamed test or binary would otherwise move to the last job unnoticed.
fn dangling_matcher(kind: &str, argument: &str, sources: &[(String, String)]) -> Option<String> {
    let pattern = argument
        .strip_prefix('/')
        .and_then(|p| p.strip_suffix('/'))
        .unwrap_or(argument);
    let alternatives: Vec<&str> = pattern.split('|').collect();
    let missing: Vec<&str> = alternatives
        .into_iter()
        .filter(|alternative| {
            let prefix = alternative.strip_prefix('^');
            let name = prefix.unwrap_or(alternative).trim_end_matches('$');
            match kind {
                "binary" if prefix.is_some() => !sources.iter().any(|(stem, _)| stem.starts_with(name)),
                "binary" => !sources.iter().any(|(stem, _)| stem == name),
                // An rstest case named after a node config file.
                _ if name.starts_with("::") => !repo_root()
                    .join("node-configs")
                    .join(format!("{}.json", name[2..].replace('_', "-")))
                    .is_file(),
                _ => !sources
                    .iter()
                    .any(|(_, text)| text.contains(&format!("fn {name}"))),
            }
        })
        .collect();
    (!missing.is_empty()).then(|| format!("{kind}({argument}) matches nothing for {missing:?}"))
}

#[test]
fn the_test_jobs_split_the_default_run_and_the_last_takes_what_the_others_leave() {
    let jobs = test_job_filters();
    assert!(jobs.len() >= 2, "the default run in several jobs: {jobs:?}");
    let (last, others) = jobs.split_last().unwrap();
    let complement = format!(
        "not ({})",
        others
            .iter()
            .map(|(_, filter)| format!("({filter})"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    assert_eq!(
        compact(&last.1),
        compact(&complement),
        "the last test job ({}) must be exactly what the others leave, so every test of the \
         default run runs in one job:\n{}",
        last.0,
        complement
    );
    let sources = test_sources();
    for (slug, filter) in others {
        for kind in ["binary", "test"] {
            for argument in matcher_arguments(filter, kind) {
                assert_eq!(
                    dangling_matcher(kind, argument, &sources),
                    None,
                    "the test job {slug:?} of {WORKFLOW}"
                );
            }
        }
    }
}

#[test]
fn a_matcher_that_names_no_test_binary_or_node_config_is_found() {
    let sources = vec![("lifecycle".to_owned(), "fn a_node_reboots() {}".to_owned())];
    assert_eq!(dangling_matcher("binary", "lifecycle", &sources), None);
    assert_eq!(dangling_matcher("binary", "/^life/", &sources), None);
    assert_eq!(dangling_matcher("test", "/^a_node_reboots/", &sources), None);
    assert_eq!(dangling_matcher("test", "/::localdns$/", &sources), None);
    assert!(dangling_matcher("binary", "lifecycles", &sources).is_some());
    assert!(dangling_matcher("test", "/^a_node_repaves/", &sources).is_some());
    assert!(dangling_matcher("test", "/::localdns$|::no_such_config$/", &sources).is_some());
    assert_eq!(
        matcher_arguments("binary(a) | binary_id(x) | (test(/^b/) & test(c))", "test"),
        vec!["/^b/", "c"]
    );
}

/// Where nextest writes the `ci` profile's JUnit report, from `.config/nextest.toml`.
fn junit_path() -> String {
    let config = nextest_config();
    let store = config["store"]["dir"]
        .as_str()
        .expect("store.dir in .config/nextest.toml");
    let junit = config["profile"]["ci"]["junit"]["path"]
        .as_str()
        .expect("profile.ci.junit.path");
    format!("{store}/ci/{junit}")
}

/// The upload-artifact steps as (condition, path).
fn uploads() -> Vec<(String, String)> {
    steps(&workflow())
        .into_iter()
        .filter(|(_, step)| {
            step["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/upload-artifact@"))
        })
        .map(|(_, step)| {
            let condition = step["if"].as_str().unwrap_or_default().to_owned();
            (
                condition,
                step["with"]["path"]
                    .as_str()
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
            )
        })
        .collect()
}

#[test]
fn workflow_uploads_the_junit_report_always() {
    let junit = junit_path();
    assert_eq!(junit, "target/nextest/ci/junit.xml");
    let uploads = uploads();
    assert!(
        uploads
            .iter()
            .any(|(condition, path)| path == &junit && condition.contains("always()")),
        "no `if: always()` upload of {junit} in {WORKFLOW}: {uploads:?}"
    );
}

#[test]
fn workflow_uploads_the_lab_evidence_on_failure() {
    let uploads = uploads();
    assert!(
        uploads.iter().any(|(condition, path)| {
            path.trim_end_matches('/') == "target/lab-artifacts" && condition.contains("failure()")
        }),
        "no `if: failure()` upload of target/lab-artifacts/ in {WORKFLOW}: {uploads:?}"
    );
}

#[test]
fn command_matching_sees_the_test_command_only_as_a_command() {
    assert!(invokes("scripts/test.sh", TEST_COMMAND));
    assert!(invokes("exec scripts/test.sh", TEST_COMMAND));
    assert!(invokes("./scripts/test.sh --partition count:1/2", TEST_COMMAND));
    assert!(invokes(
        "scripts/test.sh --stage run a.tar.zst --partition count:1/3",
        TEST_COMMAND
    ));
    assert!(!invokes("echo scripts/test.sh", TEST_COMMAND));
    assert!(!invokes("scripts/test.sh.bak", TEST_COMMAND));
    assert_eq!(command_lines("# scripts/test.sh\n\n  x  \n"), vec!["x"]);
}

/// Every cache key hashes the inputs of what the cache holds, so a change saves a new cache
/// instead of restoring the old one forever: the crates by `Cargo.lock`, cargo-nextest by the
/// script that pins its version, the lab's images by their recipes (with their pins), the
/// harness code that builds them and keys them, and the scripts. And the caches stay within
/// GitHub's 10 GB: no build directory and no Go cache is kept (docs/ci.md, "Caches").
#[test]
fn every_cache_key_hashes_the_inputs_of_what_it_holds() {
    let workflow = workflow();
    let caches: Vec<(String, String)> = steps(&workflow)
        .into_iter()
        .filter(|(_, step)| {
            step["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/cache@"))
        })
        .map(|(_, step)| {
            let key = step["with"]["key"].as_str().unwrap_or_default().to_owned();
            let paths = step["with"]["path"].as_str().unwrap_or_default().to_owned();
            (key, paths)
        })
        .collect();
    let inputs: [(&str, &[&str]); 3] = [
        ("crates-", &["'Cargo.lock'"]),
        ("nextest-", &["'scripts/setup.sh'"]),
        ("lab-", &["'images/**'", "'harness/src/**'", "'scripts/*.sh'"]),
    ];
    for (prefix, patterns) in inputs {
        let keys: Vec<&String> = caches
            .iter()
            .map(|(key, _)| key)
            .filter(|k| k.starts_with(prefix))
            .collect();
        assert!(!keys.is_empty(), "{WORKFLOW}: no {prefix} cache");
        for key in keys {
            for pattern in patterns {
                assert!(
                    key.contains(pattern),
                    "{WORKFLOW}: cache key {key:?} does not hash {pattern}"
                );
            }
        }
    }
    for (key, paths) in &caches {
        assert!(
            inputs.iter().any(|(prefix, _)| key.starts_with(prefix)),
            "{WORKFLOW}: cache {key:?} is not in the cache plan"
        );
        for big in ["unbounded/target", "go-build", "go/pkg/mod"] {
            assert!(
                !paths.contains(big),
                "{WORKFLOW}: cache {key:?} keeps {big}, beyond the plan"
            );
        }
    }
}

/// PR CI's test jobs run a nextest archive unpacked elsewhere than it was built, where cargo's
/// build-time `CARGO_BIN_EXE_<name>` paths do not exist: every integration test finds the
/// workspace's binaries through `agent::test_binary!`, which prefers nextest's run-time path.
#[test]
fn no_integration_test_names_a_binary_by_its_build_time_path() {
    let mut offenders = Vec::new();
    for krate in ["agent", "harness", "scenarios", "rehearsal"] {
        let dir = repo_root().join(krate).join("tests");
        if !dir.is_dir() {
            continue;
        }
        for path in test_binaries(&dir).into_iter().flat_map(|(_, files)| files) {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // The guest tests look for the binary in the VM themselves and fall back to this.
            let allowed = path.file_name().is_some_and(|n| n == "guest_hostnet.rs");
            if text.contains(concat!("env!(\"CARGO_BIN_", "EXE_")) && !allowed {
                offenders.push(path.display().to_string());
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "use agent::test_binary!(...) in: {offenders:?}"
    );
}
