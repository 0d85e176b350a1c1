//! `unbounded-agent start` refusing what it cannot use, before anything changes: each run gets a
//! temporary `--root` and must leave it as it was (these are safe on any host; the runs that
//! change a host are the guest tests `guest_start*.rs` and the `bootstrap` scenario).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn config(patch: Value) -> Value {
    let mut v = json!({
        "NodeName": "node1",
        "Cluster": {
            "CaCertBase64": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJmYWtlCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K",
            "ClusterDNS": "10.96.0.10",
            "Version": "v1.35.0"
        },
        "Kubelet": {
            "ApiServer": "https://192.168.100.1:6443",
            "Auth": {"BootstrapToken": "abcdef.0123456789abcdef"},
            "NodeIP": "192.168.100.10",
            "Configuration": {"podCIDR": "10.244.1.0/24"}
        },
        "MachineImage": {"URL": "http://192.0.2.1/rootfs.tar.gz", "SHA256": "a".repeat(64), "AllowHTTP": true}
    });
    agent::config::merge_patch(&mut v, &patch);
    v
}

/// Every path below `dir` with its contents (directories as empty).
fn snapshot(dir: &Path) -> BTreeSet<(PathBuf, Vec<u8>)> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeSet<(PathBuf, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(base).unwrap().to_owned();
            if e.file_type().unwrap().is_dir() {
                out.insert((rel, Vec::new()));
                walk(base, &e.path(), out);
            } else {
                out.insert((rel, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    // The host lock (`/run/unbounded-agent.lock`, volatile runtime state like a pid file) is
    // taken before anything is read; it is not host state a refusal could have changed.
    out.retain(|(p, _)| p != Path::new("run") && p != Path::new("run/unbounded-agent.lock"));
    out
}

struct Run {
    output: Output,
    before: BTreeSet<(PathBuf, Vec<u8>)>,
    after: BTreeSet<(PathBuf, Vec<u8>)>,
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

/// `start` with `config` below a fresh root prepared by `prepare`.
fn start(config: &Value, prepare: impl FnOnce(&Path)) -> Run {
    let root = tempfile::tempdir().unwrap();
    let config_path = root.path().join("config.json");
    std::fs::write(&config_path, serde_json::to_vec_pretty(config).unwrap()).unwrap();
    prepare(root.path());
    let before = snapshot(root.path());
    let output = Command::new(agent::test_binary!("unbounded-agent"))
        .args(["start", "--config"])
        .arg(&config_path)
        .arg("--root")
        .arg(root.path())
        .output()
        .unwrap();
    let after = snapshot(root.path());
    Run {
        output,
        before,
        after,
    }
}

fn write_state(root: &Path, text: &str) {
    let path = root.join("var/lib/unbounded/agent/install-state.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn start_refuses_an_invalid_config_naming_each_problem_and_changes_nothing() {
    let run = start(
        &config(json!({"NodeName": "Node 1", "Kubelet": {"Configuration": {"podCIDR": "10.244.1.7/24"}}})),
        |_| {},
    );
    assert!(!run.output.status.success());
    let err = run.stderr();
    assert!(err.contains("NodeName: "), "{err}");
    assert!(
        err.contains("Kubelet.Configuration.podCIDR: \"10.244.1.7/24\" has host bits set"),
        "{err}"
    );
    assert_eq!(run.before, run.after);
}

#[test]
fn start_refuses_a_config_without_a_pod_cidr_and_changes_nothing() {
    let run = start(&config(json!({"Kubelet": {"Configuration": null}})), |_| {});
    assert!(!run.output.status.success());
    let err = run.stderr();
    assert!(
        err.contains("Kubelet.Configuration.podCIDR: is required by `start`"),
        "{err}"
    );
    assert_eq!(run.before, run.after);
}

#[test]
fn start_refuses_an_install_state_from_a_newer_schema_and_changes_nothing() {
    let run = start(&config(json!({})), |root| {
        write_state(
            root,
            r#"{"schema": 7, "slot": "kube1", "stage": "warp", "configSha256": "x"}"#,
        )
    });
    assert!(!run.output.status.success());
    let err = run.stderr();
    assert!(err.contains("has schema 7, newer than this agent's 2"), "{err}");
    assert_eq!(run.before, run.after);
}

#[test]
fn start_on_a_node_completed_with_another_config_refuses_and_changes_nothing() {
    let other = "0".repeat(64);
    let run = start(&config(json!({})), |root| {
        write_state(
            root,
            &format!(r#"{{"schema": 1, "slot": "kube2", "stage": "complete", "configSha256": "{other}"}}"#),
        )
    });
    assert!(!run.output.status.success());
    let err = run.stderr();
    assert!(err.contains("(kube2) was started with another config"), "{err}");
    assert!(err.contains(&other), "{err}");
    assert!(err.contains("unbounded-agent apply --config FILE"), "{err}");
    assert_eq!(run.before, run.after);
}
