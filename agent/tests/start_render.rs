//! Expected-output tests of every file `start` writes (`agent::start::plan::node_files`): each
//! `tests/render/start/<case>.json` (config, host facts, machine) is rendered and compared with
//! `<case>.expected/` (every regular file, as if it were `/`) and `<case>.listing` (every path
//! with its mode, every link with its target).
//!
//! Regenerate after an intended change, then review the diff:
//! `UPDATE_EXPECTED=1 cargo test -p agent --test start_render`

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use agent::goal::{HostFacts, OptionalFacts};
use agent::names::Slot;
use agent::render::{Rendered, write_under};
use serde::Deserialize;

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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/render/start")
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
    agent::start::plan::node_files(&config, &goal, &facts.host_resolv_conf)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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

fn case_paths() -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    cases.sort();
    cases
}

#[test]
fn every_start_case_renders_exactly_its_expected_files() {
    let update = std::env::var_os("UPDATE_EXPECTED").is_some();
    let cases = case_paths();
    assert!(
        cases.len() >= 2,
        "expected at least 2 cases in {}",
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
        let actual = tempfile::tempdir().unwrap();
        write_under(actual.path(), &only_files(&rendered)).unwrap();
        let (want, got) = (tree(&expected_dir), tree(actual.path()));
        if want.is_empty() {
            failures.push(format!(
                "{stem}: {} is missing; run UPDATE_EXPECTED=1 cargo test -p agent --test start_render",
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
        "{}\n\nIf the change is intended: UPDATE_EXPECTED=1 cargo test -p agent --test start_render",
        failures.join("\n\n")
    );
}

fn text(r: &Rendered, path: &str) -> String {
    String::from_utf8(
        r.file(path)
            .unwrap_or_else(|| panic!("{path} not rendered"))
            .contents
            .clone(),
    )
    .unwrap()
}

#[test]
fn the_bootstrap_kubeconfig_is_private_and_holds_the_token() {
    let r = render_case(&cases_dir().join("localdns.json"));
    let kubeconfig = r
        .file("/var/lib/machines/kube1/etc/kubernetes/bootstrap-kubelet.conf")
        .expect("bootstrap kubeconfig rendered");
    assert_eq!(kubeconfig.mode, 0o600);
    assert!(String::from_utf8_lossy(&kubeconfig.contents).contains("token: abcdef.0123456789abcdef"));
}

#[test]
fn kubelet_keeps_the_localdns_keys_over_the_users_and_gets_the_pod_cidr() {
    let r = render_case(&cases_dir().join("localdns.json"));
    let config = text(&r, "/var/lib/machines/kube1/var/lib/kubelet/config.yaml");
    assert!(config.contains("clusterDNS:\n- 169.254.10.11\n"), "{config}");
    assert!(config.contains("podCIDR: 10.244.1.0/24\n"), "{config}");
    assert!(config.contains("cgroupDriver: systemd\n"), "{config}");
    let off = render_case(&cases_dir().join("localdns-off.json"));
    let config = text(&off, "/var/lib/machines/kube2/var/lib/kubelet/config.yaml");
    assert!(config.contains("clusterDNS:\n- 10.96.0.10\n"), "{config}");
    assert!(config.contains("clusterDomain: lab.local\n"), "{config}");
}

#[test]
fn containerd_sandbox_image_is_the_pause_ref_only_when_one_is_given() {
    let r = render_case(&cases_dir().join("localdns.json"));
    let toml = text(&r, "/var/lib/machines/kube1/etc/containerd/config.toml");
    assert!(
        toml.contains("sandbox_image = \"registry.k8s.io/pause:3.10.1\""),
        "{toml}"
    );
    let off = render_case(&cases_dir().join("localdns-off.json"));
    assert!(!text(&off, "/var/lib/machines/kube2/etc/containerd/config.toml").contains("sandbox_image"));
}

#[test]
fn without_localdns_no_localdns_file_is_written() {
    let off = render_case(&cases_dir().join("localdns-off.json"));
    let localdns: Vec<_> = off
        .files
        .iter()
        .filter(|f| f.path.to_string_lossy().contains("localdns"))
        .map(|f| f.path.display().to_string())
        .collect();
    assert!(localdns.is_empty(), "{localdns:?}");
}
