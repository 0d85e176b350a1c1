//! Shared by the host network tests: a fresh network namespace for the test thread, configs, nft.

#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::process::Command;

use agent::exec;
use agent::hostnet::NetworkSpec;
use agent::validate::{self, Config, LocalDns};

pub const NODE: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 10);
pub const CLUSTER: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 11);

/// Moves the calling test thread (and every command it starts) into a new, empty network namespace.
pub fn fresh_netns() {
    if let Err(err) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
        panic!(
            "unshare(CLONE_NEWNET) failed ({err}): these tests need root (CAP_SYS_ADMIN); run them as root"
        );
    }
}

/// A valid agent config with LocalDNS on (default listeners) and the given `NOTRACKReplies`.
pub fn config_text(notrack_replies: bool) -> String {
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pem);
    serde_json::json!({
        "NodeName": "node1",
        "Cluster": {"CaCertBase64": ca, "ClusterDNS": "10.96.0.10"},
        "Kubelet": {"ApiServer": "https://192.168.100.1:6443", "Auth": {"BootstrapToken": "abcdef.0123456789abcdef"}},
        "LocalDNS": {"Enabled": true, "NOTRACKReplies": notrack_replies}
    })
    .to_string()
}

pub fn config(notrack_replies: bool) -> Config {
    validate::parse(&config_text(notrack_replies)).unwrap_or_else(|p| panic!("test config is invalid:\n{p}"))
}

pub fn local_dns(config: &Config) -> &LocalDns {
    config
        .local_dns
        .as_ref()
        .expect("LocalDNS is enabled in the test config")
}

pub fn spec(notrack_replies: bool) -> NetworkSpec {
    NetworkSpec::from_config(local_dns(&config(notrack_replies)))
}

/// The rendered `localdns.nft` for the test config.
pub fn script(notrack_replies: bool) -> String {
    let config = config(notrack_replies);
    agent::hostnet::nft_script(&config, local_dns(&config))
}

/// `nft -j list ruleset` of the current namespace, parsed.
pub fn ruleset_json() -> serde_json::Value {
    let text =
        exec::run_stdout(Command::new("nft").args(["-j", "list", "ruleset"])).expect("nft -j list ruleset");
    serde_json::from_str(&text).expect("nft -j prints JSON")
}

/// Every rule of the ruleset as nft prints it (`nft list table`), for messages.
pub fn rules_text() -> String {
    exec::run_stdout(Command::new("nft").args(["list", "ruleset"])).expect("nft list ruleset")
}

/// Rules listed in `nft -j list ruleset` for our table, per chain.
pub fn rule_count(chain: &str) -> usize {
    ruleset_json()["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i.get("rule"))
        .filter(|r| r["table"] == "unbounded_localdns" && r["chain"] == chain)
        .count()
}

pub fn run(cmd: &mut Command) -> String {
    exec::run_stdout(cmd).unwrap_or_else(|e| panic!("{e}"))
}
