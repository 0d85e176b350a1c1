//! The PR CI workflow cannot run here, so these tests check it: `actionlint` accepts it, its jobs
//! run the README's test command (`scripts/test.sh`, which `.ci/run` runs whole) in its stages —
//! lint once, archive once, the archive's tests (the lifecycle and faults scenarios among them) over a matrix
//! of partitions — and it uploads the JUnit report always and the lab's evidence on failure.

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
    // The run stage takes the archive the archive stage wrote, one partition per matrix entry.
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
    assert!(run_line.ends_with("${{ matrix.args }}"), "{run_line}");
    let jobs = workflow()["jobs"].clone();
    let run_job = &jobs[run[0].0.as_str()];
    // Its matrix: every partition of the default run, and nothing else.
    let args: Vec<String> = run_job["strategy"]["matrix"]["include"]
        .as_sequence()
        .unwrap_or_else(|| panic!("the run stage's job has no matrix `include`: {run_job:?}"))
        .iter()
        .map(|entry| entry["args"].as_str().unwrap_or_default().to_owned())
        .collect();
    let count = args.len();
    assert!(count >= 2, "the default run in partitions: {args:?}");
    for k in 1..=count {
        assert!(
            args.iter()
                .any(|a| *a == format!("--partition count:{k}/{count}")),
            "partition {k}/{count} missing, or a job that is not a partition: {args:?}"
        );
    }
    // The default run (what `.ci/run` runs, and so each partition) holds the node's life and its
    // faults: only the guest tests (run inside a lab VM) are left out.
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
