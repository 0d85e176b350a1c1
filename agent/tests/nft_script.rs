//! The rendered nft script against the real `nft`: `nft --check` accepts it,
//! and in a fresh network namespace it applies on an empty host, re-applies
//! (replacing the table), and lists exactly as rendered.
//!
//! Needs `nft` (Debian package `nftables`) and root (`unshare -n`).

use std::process::Command;

use agent::exec;
use agent::goal::{HostFacts, OptionalFacts};
use agent::names::Slot;

fn script(notrack_replies: bool) -> String {
    let config = serde_json::json!({
        "NodeName": "node1",
        "Cluster": {"CaCertBase64": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJmYWtlCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K", "ClusterDNS": "10.96.0.10"},
        "Kubelet": {"ApiServer": "https://10.0.0.1:6443", "Auth": {"BootstrapToken": "abcdef.0123456789abcdef"}, "NodeIP": "10.0.0.5"},
        "LocalDNS": {"Enabled": true, "NOTRACKReplies": notrack_replies},
    });
    let config = agent::validate::parse_value(config).unwrap();
    let facts = HostFacts {
        host_resolv_conf: "nameserver 10.0.0.2\n".into(),
        optional: OptionalFacts::default(),
    };
    let goal = agent::goal::resolve(&config, &facts, Slot::Kube1).unwrap();
    agent::render::host::nft_script(goal.local_dns.as_ref().unwrap())
}

fn require_nft() {
    let found = exec::run(Command::new("nft").arg("--version"));
    assert!(
        found.is_ok(),
        "`nft` is required for this test: install it with `apt-get install nftables` ({found:?})"
    );
}

fn write(script: &str) -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new().suffix(".nft").tempfile().unwrap();
    std::fs::write(f.path(), script).unwrap();
    f
}

/// Runs the shell `commands` in a fresh network namespace (`unshare --net`, needs root); its stdout.
fn in_fresh_netns(commands: &str) -> String {
    exec::run_stdout(Command::new("unshare").args(["--net", "sh", "-c", commands])).unwrap_or_else(|e| {
        panic!("applying in a fresh network namespace failed (needs root for `unshare --net`): {e}")
    })
}

#[test]
fn nft_check_accepts_the_rendered_script() {
    require_nft();
    for replies in [true, false] {
        let f = write(&script(replies));
        exec::run(Command::new("nft").arg("--check").arg("-f").arg(f.path()))
            .unwrap_or_else(|e| panic!("nft --check refused the script (replies={replies}): {e}"));
    }
}

#[test]
fn script_applies_twice_in_a_fresh_netns_and_lists_as_rendered() {
    require_nft();
    let text = script(true);
    let f = write(&text);
    let path = f.path().display().to_string();
    // Apply on an empty ruleset, apply again (replacing the table), then list.
    let out = in_fresh_netns(&format!(
        "nft -f {path} && nft -f {path} && nft list table ip unbounded_localdns"
    ));
    let table_part = &text[text.rfind("table ip unbounded_localdns {").unwrap()..];
    assert_eq!(
        out, table_part,
        "nft lists the table differently from the rendered script"
    );
    assert_eq!(
        out.matches("notrack comment \"unbounded-localdns: skip conntrack\"")
            .count(),
        16
    );
}

#[test]
fn applied_script_matches_the_host_network_model_both_ways() {
    require_nft();
    for replies in [true, false] {
        let f = write(&script(replies));
        let path = f.path().display().to_string();
        let json = in_fresh_netns(&format!(
            "nft -f {path} && nft -j list table ip unbounded_localdns"
        ));
        let live = agent::hostnet::model::from_nft_json(&json).unwrap();
        let spec = agent::hostnet::NetworkSpec {
            node_listener: [169, 254, 10, 10].into(),
            cluster_listener: [169, 254, 10, 11].into(),
            notrack_replies: replies,
        };
        assert_eq!(live, agent::hostnet::model::desired(&spec), "replies={replies}");
    }
}
