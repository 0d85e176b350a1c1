//! The whole host network apply and reset with the real dummy link: needs a kernel with
//! `CONFIG_DUMMY` (Debian's), so these run as root inside a lab VM (the `guest_` prefix; see
//! `.config/nextest.toml`), each in a fresh network namespace.

mod hostnet_support;

use std::process::Command;

use agent::hostnet::link::{Netlink, ObservedLink};
use agent::hostnet::plan::Step;
use agent::hostnet::{LINK_NAME, ResetPaths, apply, model, nft, reset};
use agent::names::Slot;
use hostnet_support::*;

/// A fresh network namespace on a kernel that has dummy links (fails on this project's build host,
/// whose kernel has none: these tests run in a lab VM, see `harness/tests/lab_guest_tests.rs`).
fn guest_netns() {
    fresh_netns();
    let netlink = Netlink::open().expect("netlink");
    match netlink.create_dummy("probe0") {
        Ok(()) => netlink
            .delete(netlink.observe("probe0").unwrap().unwrap().index)
            .unwrap(),
        Err(err) => panic!(
            "{err}: guest tests need Debian's kernel; run them in a lab VM with \
             `cargo nextest run -p harness --test lab_guest_tests`"
        ),
    }
}

/// `unbounded-agent`: in the guest the test archive's copy, which nextest names at run time or which
/// sits beside the test's `deps/` directory; on a host the one cargo built.
fn agent_binary() -> std::path::PathBuf {
    let mut tried: Vec<std::path::PathBuf> = [
        "NEXTEST_BIN_EXE_unbounded-agent",
        "NEXTEST_BIN_EXE_unbounded_agent",
        "CARGO_BIN_EXE_unbounded-agent",
    ]
    .iter()
    .filter_map(|var| std::env::var_os(var).map(Into::into))
    .collect();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
    {
        tried.push(dir.join("unbounded-agent"));
    }
    tried.push(env!("CARGO_BIN_EXE_unbounded-agent").into());
    tried.iter().find(|p| p.is_file()).cloned().unwrap_or_else(|| {
        panic!("unbounded-agent not found (tried {tried:?}): build it with `cargo build -p agent --bins`")
    })
}

fn observed_link() -> Option<ObservedLink> {
    Netlink::open()
        .expect("netlink")
        .observe(LINK_NAME)
        .expect("observe localdns")
}

fn sorted(mut v: Vec<(std::net::Ipv4Addr, u8)>) -> Vec<(std::net::Ipv4Addr, u8)> {
    v.sort();
    v
}

fn ip_addr_text() -> String {
    run(Command::new("ip").args(["-d", "addr", "show"]))
}

#[test]
fn guest_apply_creates_exactly_the_designed_link_and_ruleset() {
    guest_netns();
    let report = apply(&spec(true), &script(true)).unwrap_or_else(|e| panic!("apply: {e:#}"));
    assert!(report.changed());
    let link = observed_link().expect("link localdns exists after apply");
    assert_eq!(link.kind.as_deref(), Some("dummy"), "{}", ip_addr_text());
    assert!(link.up, "{}", ip_addr_text());
    assert_eq!(
        sorted(link.ipv4),
        vec![(NODE, 32), (CLUSTER, 32)],
        "{}",
        ip_addr_text()
    );
    // The live table equals the rendered model, and `nft -j` counts the rules of docs/design.md §6.
    assert_eq!(
        nft::read_table().unwrap(),
        Some(model::desired(&spec(true))),
        "{}",
        rules_text()
    );
    assert_eq!(
        (rule_count("prerouting"), rule_count("output")),
        (4, 12),
        "{}",
        rules_text()
    );
}

#[test]
fn guest_second_apply_changes_nothing() {
    guest_netns();
    apply(&spec(true), &script(true)).unwrap();
    let handles_before = rules_text();
    let second = apply(&spec(true), &script(true)).unwrap();
    assert_eq!(second.steps, Vec::<Step>::new(), "second apply: {second}");
    assert_eq!(second.to_string(), "localdns network: no change\n");
    assert_eq!(
        rules_text(),
        handles_before,
        "the table was rewritten by an apply that should change nothing"
    );
}

#[test]
fn guest_stale_addresses_are_replaced_and_a_down_link_comes_up() {
    guest_netns();
    run(Command::new("ip").args(["link", "add", "localdns", "type", "dummy"]));
    run(Command::new("ip").args(["addr", "add", "169.254.20.10/32", "dev", "localdns"]));
    run(Command::new("ip").args(["addr", "add", "169.254.10.10/24", "dev", "localdns"]));
    let report = apply(&spec(false), &script(false)).unwrap();
    assert!(report.steps.contains(&Step::SetLinkUp), "{report}");
    let link = observed_link().unwrap();
    assert!(link.up);
    assert_eq!(
        sorted(link.ipv4),
        vec![(NODE, 32), (CLUSTER, 32)],
        "{}",
        ip_addr_text()
    );
    assert!(!apply(&spec(false), &script(false)).unwrap().changed());
}

#[test]
fn guest_a_bridge_called_localdns_is_refused_and_survives() {
    guest_netns();
    run(Command::new("ip").args(["link", "add", "localdns", "type", "bridge"]));
    let err = apply(&spec(true), &script(true)).unwrap_err();
    assert!(err.to_string().contains("kind bridge"), "{err}");
    assert_eq!(observed_link().unwrap().kind.as_deref(), Some("bridge"));
    assert_eq!(
        nft::read_table().unwrap(),
        None,
        "nothing changes when the link is refused"
    );
}

#[test]
fn guest_reset_leaves_nothing_of_ours() {
    guest_netns();
    apply(&spec(true), &script(true)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let paths = ResetPaths::new(dir.path());
    for file in [
        paths.network_unit(),
        paths.nft_script(),
        paths.nspawn_dropin(Slot::Kube1),
    ] {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "# test\n").unwrap();
    }
    let report = reset(&paths);
    assert!(report.is_clean(), "{report}");
    assert!(observed_link().is_none(), "{}", ip_addr_text());
    assert_eq!(nft::read_table().unwrap(), None, "{}", rules_text());
    assert!(
        !paths.network_unit().exists()
            && !paths.nft_script().exists()
            && !paths.nspawn_dropin(Slot::Kube1).exists()
    );
    let again = reset(&paths);
    assert!(again.is_clean() && again.removed.is_empty(), "{again}");
}

#[test]
fn guest_reset_with_only_the_link_present_works() {
    guest_netns();
    run(Command::new("ip").args(["link", "add", "localdns", "type", "dummy"]));
    let dir = tempfile::tempdir().unwrap();
    let report = reset(&ResetPaths::new(dir.path()));
    assert!(report.is_clean(), "{report}");
    assert!(
        report.removed.iter().any(|r| r.contains("dummy link localdns")),
        "{report}"
    );
    assert!(observed_link().is_none());
}

#[test]
fn guest_apply_through_the_cli_writes_the_script_it_applied() {
    guest_netns();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, config_text(true)).unwrap();
    let agent = agent_binary();
    let args = |root: &std::path::Path| {
        vec![
            "localdns".to_owned(),
            "network".into(),
            "apply".into(),
            "--config".into(),
            config.display().to_string(),
            "--root".into(),
            root.display().to_string(),
        ]
    };
    let first = run(Command::new(&agent).args(args(dir.path())));
    assert!(first.contains("create dummy link localdns"), "{first}");
    let second = run(Command::new(&agent).args(args(dir.path())));
    assert_eq!(second, "localdns network: no change\n");
    let written = std::fs::read_to_string(ResetPaths::new(dir.path()).nft_script()).unwrap();
    assert_eq!(written, script(true));
}
