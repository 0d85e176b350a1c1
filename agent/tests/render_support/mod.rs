//! Shared by the expected-output render tests: loading a case, and comparing what it renders
//! with `<case>.expected/` and `<case>.listing` (or regenerating them with `UPDATE_EXPECTED`).

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use agent::goal::{Goal, HostFacts, OptionalFacts};
use agent::names::Slot;
use agent::render::{Rendered, write_under};
use agent::validate::Config;
use serde::Deserialize;

/// One case file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    machine: Slot,
    host_resolv_conf: String,
    #[serde(default)]
    host_facts: OptionalFacts,
    config: serde_json::Value,
}

/// A case file's config (validated), its host facts and the goal they resolve to.
pub struct Loaded {
    pub config: Config,
    pub facts: HostFacts,
    pub goal: Goal,
}

/// Reads and resolves the case file at `path`; panics naming the file when it does not.
pub fn load_case(path: &Path) -> Loaded {
    let text = std::fs::read_to_string(path).unwrap();
    let case: Case = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let config = agent::validate::parse_value(case.config)
        .unwrap_or_else(|p| panic!("{}: config is not valid:\n{p}", path.display()));
    let facts = HostFacts {
        host_resolv_conf: case.host_resolv_conf,
        optional: case.host_facts,
    };
    let goal = agent::goal::resolve(&config, &facts, case.machine)
        .unwrap_or_else(|e| panic!("{}: goal: {e}", path.display()));
    Loaded { config, facts, goal }
}

/// Every path with its mode and every link with its target, one a line, sorted.
pub fn listing(r: &Rendered) -> String {
    let mut lines: Vec<String> = r
        .files
        .iter()
        .map(|f| format!("{:04o} {}", f.mode, f.path.display()))
        .collect();
    lines.extend(
        r.links
            .iter()
            .map(|l| format!("link {} -> {}", l.path.display(), l.target.display())),
    );
    lines.sort();
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Every regular file below `dir`, relative path → contents.
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let e = e.unwrap();
            let ty = e.file_type().unwrap();
            if ty.is_dir() {
                walk(base, &e.path(), out);
            } else if ty.is_file() {
                out.insert(
                    e.path().strip_prefix(base).unwrap().to_owned(),
                    std::fs::read(e.path()).unwrap(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn only_files(r: &Rendered) -> Rendered {
    Rendered {
        files: r.files.clone(),
        links: Vec::new(),
    }
}

/// The case files (`*.json`) in `dir`, sorted.
pub fn case_paths(dir: &Path) -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    cases.sort();
    cases
}

/// Renders each of the (at least `min_cases`) cases in `dir` with `render` and compares every
/// regular file with `<case>.expected/` (as if it were `/`) and the listing with `<case>.listing`;
/// with `UPDATE_EXPECTED` set, rewrites those instead. `test` is the test target named in the
/// regeneration command.
pub fn check_expected_outputs(dir: &Path, min_cases: usize, test: &str, render: impl Fn(&Path) -> Rendered) {
    let update = std::env::var_os("UPDATE_EXPECTED").is_some();
    let cases = case_paths(dir);
    assert!(
        cases.len() >= min_cases,
        "expected at least {min_cases} cases in {}",
        dir.display()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let stem = case.file_stem().unwrap().to_string_lossy().into_owned();
        let expected_dir = dir.join(format!("{stem}.expected"));
        let listing_file = dir.join(format!("{stem}.listing"));
        let rendered = render(case);
        if update {
            let _ = std::fs::remove_dir_all(&expected_dir);
            write_under(&expected_dir, &only_files(&rendered)).unwrap();
            std::fs::write(&listing_file, listing(&rendered)).unwrap();
            continue;
        }
        let actual = tempfile::tempdir().unwrap();
        write_under(actual.path(), &only_files(&rendered)).unwrap();
        let (want, got) = (tree(&expected_dir), tree(actual.path()));
        if want.is_empty() {
            failures.push(format!(
                "{stem}: {} is missing; run UPDATE_EXPECTED=1 cargo test -p agent --test {test}",
                expected_dir.display()
            ));
            continue;
        }
        for path in want.keys().chain(got.keys()).collect::<BTreeSet<_>>() {
            match (want.get(path), got.get(path)) {
                (Some(w), Some(g)) if w == g => {}
                (Some(w), Some(g)) => failures.push(format!(
                    "{stem}: /{} differs\n--- expected\n{}\n--- rendered\n{}",
                    path.display(),
                    String::from_utf8_lossy(w),
                    String::from_utf8_lossy(g)
                )),
                (Some(_), None) => {
                    failures.push(format!("{stem}: /{} expected but not rendered", path.display()))
                }
                (None, _) => failures.push(format!("{stem}: /{} rendered but not expected", path.display())),
            }
        }
        let want_listing = std::fs::read_to_string(&listing_file).unwrap_or_default();
        if want_listing != listing(&rendered) {
            failures.push(format!(
                "{stem}: listing differs\n--- expected\n{want_listing}--- rendered\n{}",
                listing(&rendered)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\nIf the change is intended: UPDATE_EXPECTED=1 cargo test -p agent --test {test}",
        failures.join("\n\n")
    );
}

/// The text of the rendered file at `path`; panics when it was not rendered.
pub fn text(r: &Rendered, path: &str) -> String {
    String::from_utf8(
        r.file(path)
            .unwrap_or_else(|| panic!("{path} not rendered"))
            .contents
            .clone(),
    )
    .unwrap()
}
