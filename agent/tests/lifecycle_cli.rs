//! The lifecycle commands refusing what they cannot do, before anything changes, and `reset`
//! below a temporary `--root` (safe on any host; the runs that change a real node are the
//! `lifecycle` scenario's).

use std::path::Path;
use std::process::{Command, Output};

fn agent(root: &Path, args: &[&str]) -> Output {
    Command::new(agent::test_binary!("unbounded-agent"))
        .args(args)
        .arg("--root")
        .arg(root)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel == "run" || rel == "run/unbounded-agent.lock" {
                continue;
            }
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(rel);
        }
    }
    out.sort();
    out
}

#[test]
fn reboot_apply_and_repave_on_a_host_without_a_node_refuse_and_change_nothing() {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("config.json");
    std::fs::write(&config, "{}").unwrap();
    let config = config.to_str().unwrap();
    for args in [
        vec!["reboot"],
        vec!["repave"],
        vec!["repave", "--to", "kube2"],
        vec!["apply", "--config", config],
    ] {
        let out = agent(root.path(), &args);
        assert!(!out.status.success(), "{args:?}: {}", text(&out));
        let t = text(&out);
        assert!(
            t.contains(&format!("`{}` needs a finished node", args[0]))
                && t.contains("run `unbounded-agent start` first"),
            "{args:?}: {t}"
        );
        assert_eq!(files(root.path()), ["config.json"], "{args:?}");
    }
}

#[test]
fn repave_to_an_unknown_slot_is_a_usage_error() {
    let root = tempfile::tempdir().unwrap();
    let out = agent(root.path(), &["repave", "--to", "kube3"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("kube3"), "{}", text(&out));
}

#[test]
fn reset_dry_run_lists_what_it_would_remove_and_reset_removes_it_once() {
    let root = tempfile::tempdir().unwrap();
    for p in [
        "var/lib/machines/kube2/etc/os-release",
        "etc/systemd/nspawn/kube2.nspawn",
        "etc/unbounded/agent/kube2-applied-config.json",
        "var/lib/unbounded/agent/install-state.json",
    ] {
        let path = root.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "x").unwrap();
    }
    let before = files(root.path());
    let dry = agent(root.path(), &["reset", "--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry));
    let t = text(&dry);
    for p in [
        "var/lib/machines/kube2",
        "kube2.nspawn",
        "kube2-applied-config.json",
        "install-state.json",
    ] {
        assert!(t.contains(p), "dry run does not name {p}:\n{t}");
    }
    assert_eq!(files(root.path()), before, "the dry run changed something");
    let json = agent(root.path(), &["reset", "--dry-run", "--output", "json"]);
    assert!(json.status.success(), "{}", text(&json));
    let plan: serde_json::Value = serde_json::from_slice(&json.stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{}", text(&json)));
    assert_eq!(plan["dryRun"], true);
    let listed: Vec<&str> = plan["wouldRemove"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(
        listed.iter().any(|item| item.contains("install-state.json")),
        "{listed:?}"
    );
    assert_eq!(files(root.path()), before, "the JSON dry run changed something");
    let refused = agent(root.path(), &["reset", "--output", "json"]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "--output without --dry-run is a usage error: {}",
        text(&refused)
    );

    let out = agent(root.path(), &["reset"]);
    assert!(out.status.success(), "{}", text(&out));
    let left = files(root.path());
    assert!(
        left.iter()
            .all(|p| !p.contains("kube2") && !p.contains("unbounded")),
        "left behind: {left:?}"
    );
    let again = agent(root.path(), &["reset"]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        text(&again).contains("nothing of the agent's was on this host"),
        "{}",
        text(&again)
    );
}

#[test]
fn status_without_a_node_says_so_and_exits_1_and_names_an_interrupted_operation() {
    let root = tempfile::tempdir().unwrap();
    let out = agent(root.path(), &["status"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no node is installed here"), "{}", text(&out));

    let state = root.path().join("var/lib/unbounded/agent/install-state.json");
    std::fs::create_dir_all(state.parent().unwrap()).unwrap();
    std::fs::write(
        &state,
        r#"{"schema":2,"slot":"kube1","stage":"complete","configSha256":"abc",
            "operation":{"kind":"reboot","step":"stop-node","configSha256":"abc"}}"#,
    )
    .unwrap();
    let out = agent(root.path(), &["status", "--output", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["install"]["slot"], "kube1");
    assert_eq!(status["install"]["operationUnderWay"]["kind"], "reboot");
    let problems = status["problems"].to_string();
    assert!(
        problems.contains("unbounded-agent reboot") && problems.contains("stop-node"),
        "{problems}"
    );
}

#[test]
fn a_second_agent_is_refused_while_one_holds_the_host_lock() {
    let root = tempfile::tempdir().unwrap();
    let _held = agent::lifecycle::lock::take(root.path(), "start").unwrap();
    let out = agent(root.path(), &["reset"]);
    assert!(!out.status.success());
    let t = text(&out);
    assert!(
        t.contains("another unbounded-agent is acting on this host") && t.contains("running `start`"),
        "{t}"
    );
}
