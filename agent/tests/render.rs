//! Expected-output tests: each `tests/render/<case>.json` (config, host facts,
//! machine) is rendered and compared with `<case>.expected/` (every regular
//! file, as if it were `/`) and `<case>.listing` (every path with its mode,
//! every link with its target).
//!
//! Regenerate after an intended change, then review the diff:
//! `UPDATE_EXPECTED=1 cargo test -p agent --test render`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agent::goal::{HostFacts, OptionalFacts};
use agent::names::Slot;
use agent::render::{Rendered, write_under};
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

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/render")
}

fn render_case(path: &Path) -> Rendered {
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
    agent::render::render(&goal).unwrap_or_else(|e| panic!("{}: render: {e}", path.display()))
}

fn listing(r: &Rendered) -> String {
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
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
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

#[test]
fn every_case_renders_exactly_its_expected_files() {
    let update = std::env::var_os("UPDATE_EXPECTED").is_some();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 5,
        "expected at least 5 cases in {}",
        cases_dir().display()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let stem = case.file_stem().unwrap().to_string_lossy().into_owned();
        let expected_dir = cases_dir().join(format!("{stem}.expected"));
        let listing_file = cases_dir().join(format!("{stem}.listing"));
        let rendered = render_case(case);
        if update {
            let _ = std::fs::remove_dir_all(&expected_dir);
            write_under(&expected_dir, &only_files(&rendered)).unwrap();
            std::fs::write(&listing_file, listing(&rendered)).unwrap();
            continue;
        }
        let actual_dir = tempfile::tempdir().unwrap();
        write_under(actual_dir.path(), &only_files(&rendered)).unwrap();
        let (want, got) = (tree(&expected_dir), tree(actual_dir.path()));
        if want.is_empty() {
            failures.push(format!(
                "{stem}: {} is missing; run UPDATE_EXPECTED=1 cargo test -p agent --test render",
                expected_dir.display()
            ));
            continue;
        }
        for path in want
            .keys()
            .chain(got.keys())
            .collect::<std::collections::BTreeSet<_>>()
        {
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
        "{}\n\nIf the change is intended: UPDATE_EXPECTED=1 cargo test -p agent --test render",
        failures.join("\n\n")
    );
}

#[test]
fn custom_limits_render_a_fractional_cpu_quota() {
    let r = render_case(&cases_dir().join("custom-listeners-limits.json"));
    let slice = r
        .file("/var/lib/machines/kube2/etc/systemd/system/localdns.slice")
        .expect("slice rendered");
    let text = String::from_utf8_lossy(&slice.contents);
    assert!(
        text.contains("\nCPUQuota=200.8%\n") && text.contains("\nMemoryMax=256M\n"),
        "{text}"
    );
}

#[test]
fn rendering_is_deterministic_byte_for_byte() {
    for case in ["defaults", "resolved-host", "custom-template"] {
        let path = cases_dir().join(format!("{case}.json"));
        assert_eq!(render_case(&path), render_case(&path), "{case}");
    }
}
