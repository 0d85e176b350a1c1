//! `unbounded-agent localdns network apply|reset` on this host, each test in a fresh network
//! namespace (the binary inherits it): a foreign `localdns` link is refused and survives, reset
//! works with only part of the state present, and a failure to list tables is an error.

mod hostnet_support;

use std::path::Path;
use std::process::{Command, Output};

use agent::hostnet::link::Netlink;
use agent::hostnet::{ResetPaths, nft};
use agent::names::Slot;
use hostnet_support::*;

static AGENT: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| agent::test_binary!("unbounded-agent"));

fn agent(args: &[&str]) -> Output {
    Command::new(&*AGENT)
        .args(args)
        .output()
        .expect("run unbounded-agent")
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn write_config(dir: &Path) -> String {
    let path = dir.join("config.json");
    std::fs::write(&path, config_text(true)).unwrap();
    path.display().to_string()
}

fn link_kind() -> Option<Option<String>> {
    Netlink::open()
        .unwrap()
        .observe("localdns")
        .unwrap()
        .map(|l| l.kind)
}

#[test]
fn apply_refuses_a_bridge_called_localdns_changes_nothing_and_the_bridge_survives() {
    fresh_netns();
    run(Command::new("ip").args(["link", "add", "localdns", "type", "bridge"]));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let root = dir.path().join("root");
    let out = agent(&[
        "localdns",
        "network",
        "apply",
        "--config",
        &config,
        "--root",
        root.to_str().unwrap(),
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("kind bridge, not dummy"),
        "{}",
        text(&out)
    );
    assert_eq!(
        link_kind(),
        Some(Some("bridge".into())),
        "the bridge must survive"
    );
    assert_eq!(nft::read_table().unwrap(), None, "no table after a refused apply");
    assert!(
        !ResetPaths::new(&root).nft_script().exists(),
        "no nft script after a refused apply"
    );
}

#[test]
fn reset_refuses_to_delete_a_bridge_called_localdns_but_carries_on() {
    fresh_netns();
    run(Command::new("ip").args(["link", "add", "localdns", "type", "bridge"]));
    nft::replace_table(&script(true)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = agent(&[
        "localdns",
        "network",
        "reset",
        "--root",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !out.status.success(),
        "a refused link is a failure to report:\n{}",
        text(&out)
    );
    assert!(
        stdout.contains("FAILED: dummy link localdns") && stdout.contains("kind bridge"),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains("removed: nft table ip unbounded_localdns"),
        "{}",
        text(&out)
    );
    assert_eq!(
        link_kind(),
        Some(Some("bridge".into())),
        "the bridge must survive"
    );
    assert_eq!(nft::read_table().unwrap(), None);
}

#[test]
fn reset_with_only_the_table_present_removes_it_and_succeeds() {
    fresh_netns();
    nft::replace_table(&script(true)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = agent(&[
        "localdns",
        "network",
        "reset",
        "--root",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains("removed: nft table ip unbounded_localdns"),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains("already absent: dummy link localdns"),
        "{}",
        text(&out)
    );
    assert_eq!(nft::read_table().unwrap(), None);
}

#[test]
fn reset_removes_unit_script_drop_ins_and_enablement_below_the_root() {
    fresh_netns();
    let dir = tempfile::tempdir().unwrap();
    let paths = ResetPaths::new(dir.path());
    let wants = paths.unit_dir().join("multi-user.target.wants");
    let override_conf = paths
        .unit_dir()
        .join("systemd-nspawn@kube1.service.d/override.conf");
    let [path_unit, refresh_unit, network_unit] = paths.unit_files();
    assert_eq!(network_unit, paths.network_unit());
    for file in [
        paths.network_unit(),
        path_unit.clone(),
        refresh_unit.clone(),
        paths.nft_script(),
        paths.nspawn_dropin(Slot::Kube1),
        paths.nspawn_dropin(Slot::Kube2),
        override_conf.clone(),
    ] {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "# test\n").unwrap();
    }
    std::fs::create_dir_all(&wants).unwrap();
    std::os::unix::fs::symlink(
        paths.network_unit(),
        wants.join("unbounded-localdns-network.service"),
    )
    .unwrap();
    let paths_wants = paths.unit_dir().join("paths.target.wants");
    std::fs::create_dir_all(&paths_wants).unwrap();
    std::os::unix::fs::symlink(&path_unit, paths_wants.join("unbounded-localdns-upstreams.path")).unwrap();

    let out = agent(&[
        "localdns",
        "network",
        "reset",
        "--root",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    for gone in [
        paths.network_unit(),
        path_unit,
        refresh_unit,
        paths.nft_script(),
        paths.nspawn_dropin(Slot::Kube1),
        paths.nspawn_dropin(Slot::Kube2),
    ] {
        assert!(
            !gone.exists(),
            "{} survived reset:\n{}",
            gone.display(),
            text(&out)
        );
    }
    assert!(
        std::fs::symlink_metadata(wants.join("unbounded-localdns-network.service")).is_err(),
        "enablement link survived"
    );
    assert!(
        std::fs::symlink_metadata(paths_wants.join("unbounded-localdns-upstreams.path")).is_err(),
        "the path unit's enablement link survived"
    );
    assert!(override_conf.exists(), "someone else's drop-in must stay");
    assert!(
        !paths.nspawn_dropin(Slot::Kube2).parent().unwrap().exists(),
        "an emptied drop-in directory goes too"
    );

    // A second reset finds nothing and still succeeds.
    let again = agent(&[
        "localdns",
        "network",
        "reset",
        "--root",
        dir.path().to_str().unwrap(),
    ]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        !String::from_utf8_lossy(&again.stdout).contains("removed:"),
        "{}",
        text(&again)
    );
}

#[test]
fn reset_reports_a_failure_to_list_tables_as_failed_not_absent() {
    fresh_netns();
    nft::replace_table(&script(true)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Without privileges nft cannot list the ruleset: a real failure to list, not an absent table.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(&*AGENT)
        .args([
            "localdns",
            "network",
            "reset",
            "--root",
            dir.path().to_str().unwrap(),
        ])
        .output()
        .expect("setpriv (util-linux) runs the agent without privileges");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains("FAILED: nft table ip unbounded_localdns"),
        "{}",
        text(&out)
    );
    assert!(!stdout.contains("already absent: nft table"), "{}", text(&out));
    assert!(nft::read_table().unwrap().is_some(), "the table is still there");
}

#[test]
fn apply_with_localdns_disabled_changes_nothing() {
    fresh_netns();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(
        &path,
        config_text(true).replace("\"Enabled\":true", "\"Enabled\":false"),
    )
    .unwrap();
    let out = agent(&[
        "localdns",
        "network",
        "apply",
        "--config",
        path.to_str().unwrap(),
        "--root",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("disabled"),
        "{}",
        text(&out)
    );
    assert_eq!(nft::read_table().unwrap(), None);
    assert_eq!(link_kind(), None);
}

#[test]
fn apply_with_an_invalid_config_names_the_problem_and_changes_nothing() {
    fresh_netns();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(
        &path,
        config_text(true).replace(
            "\"Enabled\":true",
            "\"Enabled\":true,\"NodeListenerIP\":\"169.254.10\"",
        ),
    )
    .unwrap();
    let out = agent(&[
        "localdns",
        "network",
        "apply",
        "--config",
        path.to_str().unwrap(),
        "--root",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NodeListenerIP"),
        "{}",
        text(&out)
    );
    assert_eq!(nft::read_table().unwrap(), None);
}
