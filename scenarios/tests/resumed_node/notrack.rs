//! The `notrack` check: on a joined LocalDNS node the host holds exactly what docs/design.md §6 says — the
//! dummy link `localdns`, up, with exactly the two listener /32s; the table `ip
//! unbounded_localdns` with its two raw-priority chains and exactly the 8 DNS request, 4 DNS reply
//! and 4 `/ready` probe NOTRACK rules, each with the comment; the network unit ordered between
//! nftables and the machine — and under a burst of pod queries to both listeners, with the
//! supervisor probing them all along, the conntrack table holds no entry for a listener address
//! (any port: DNS, the probes, anything else of ours), with the Kind cluster's kube-proxy running
//! on the node and its nftables table loaded beside ours. The expected link and table are written out here from docs/design.md §6, not taken
//! from the agent's renderer. The conntrack reads are controlled: the same pods also query a
//! DNS server that is not a listener, and those (tracked) queries must show up in the reads.

use std::collections::BTreeSet;

use anyhow::{Context, ensure};
use scenarios::cluster::wait_node_ready;
use scenarios::conntrack_burst::listener_queries_leave_no_conntrack_entries;
use scenarios::host_state::{
    self, LINK, NETWORK_UNIT, NFT_FAMILY, NFT_TABLE, read_link, read_nft_table, unit_properties,
};
use scenarios::kube_proxy::{kube_proxys_table_sits_beside_localdns, wait_kube_proxy_running};
use scenarios::node::JoinedNode;

/// Spec §6's table for the default listeners with `NOTRACKReplies` (node-configs/localdns.json).
const EXPECTED_CHAINS: [&str; 2] = [
    "prerouting: type filter hook prerouting priority -300 policy accept",
    "output: type filter hook output priority -300 policy accept",
];
const EXPECTED_RULES: [&str; 16] = [
    r#"prerouting: ip daddr 169.254.10.10 tcp dport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"prerouting: ip daddr 169.254.10.10 udp dport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"prerouting: ip daddr 169.254.10.11 tcp dport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"prerouting: ip daddr 169.254.10.11 udp dport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip daddr 169.254.10.10 tcp dport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip daddr 169.254.10.10 udp dport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip daddr 169.254.10.11 tcp dport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip daddr 169.254.10.11 udp dport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip saddr 169.254.10.10 tcp sport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip saddr 169.254.10.10 udp sport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip saddr 169.254.10.11 tcp sport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip saddr 169.254.10.11 udp sport 53 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip daddr 169.254.10.10 tcp dport 8181 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip saddr 169.254.10.10 tcp sport 8181 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip daddr 169.254.10.11 tcp dport 8181 notrack comment "unbounded-localdns: skip conntrack""#,
    r#"output: ip saddr 169.254.10.11 tcp sport 8181 notrack comment "unbounded-localdns: skip conntrack""#,
];
const EXPECTED_ADDRESSES: [&str; 2] = ["169.254.10.10/32", "169.254.10.11/32"];

/// The check this module's doc describes.
pub(crate) fn the_host_holds_exactly_the_designed_link_and_table_and_listener_dns_is_never_tracked(
    node: &mut JoinedNode,
) -> anyhow::Result<()> {
    let local_dns = node.deployed.config.local_dns.clone().unwrap_or_default();
    ensure!(
        local_dns.node_listener_ip.is_none()
            && local_dns.cluster_listener_ip.is_none()
            && local_dns.notrack_replies != Some(false),
        "this scenario expects the default listeners with NOTRACKReplies, the config has {local_dns:?}"
    );
    let name = node.deployed.name.clone();
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    let machine = node.machine()?;

    link_is_exactly_the_designed_one(node)?;
    table_is_exactly_the_designed_one(node)?;
    network_unit_sits_between_nftables_and_the_machine(node, &machine)?;
    // The burst runs with the Kind cluster's kube-proxy rules loaded on the host.
    wait_kube_proxy_running(node, node.deadline(3))?;
    kube_proxys_table_sits_beside_localdns(node, node.deadline(2))?;
    listener_queries_leave_no_conntrack_entries(node)
}

pub(crate) fn link_is_exactly_the_designed_one(node: &JoinedNode) -> anyhow::Result<()> {
    let link = read_link(&node.vm, LINK)?.with_context(|| format!("the host has no link {LINK}"))?;
    ensure!(
        link.kind.as_deref() == Some("dummy"),
        "link {LINK} is of kind {:?}, expected dummy: {link:?}",
        link.kind
    );
    ensure!(link.is_up(), "link {LINK} is not up (flags {:?})", link.flags);
    let expected: BTreeSet<String> = EXPECTED_ADDRESSES.iter().map(|a| a.to_string()).collect();
    ensure!(
        link.ipv4 == expected,
        "link {LINK} has IPv4 addresses {:?}, expected exactly {expected:?}",
        link.ipv4
    );
    // The kernel gives an up link an IPv6 link-local address by itself; anything wider would be
    // an address someone added.
    ensure!(
        link.ipv6.iter().all(|a| a.ends_with("scope link")),
        "link {LINK} has IPv6 addresses beyond link-local: {:?}",
        link.ipv6
    );
    eprintln!(
        "==> link {LINK}: dummy, up, {:?} (IPv6: {:?})",
        link.ipv4, link.ipv6
    );
    Ok(())
}

pub(crate) fn table_is_exactly_the_designed_one(node: &JoinedNode) -> anyhow::Result<()> {
    let table = read_nft_table(&node.vm, NFT_FAMILY, NFT_TABLE)?
        .with_context(|| format!("the host has no nft table {NFT_FAMILY} {NFT_TABLE}"))?;
    let chains: BTreeSet<String> = EXPECTED_CHAINS.iter().map(|c| c.to_string()).collect();
    let rules: BTreeSet<String> = EXPECTED_RULES.iter().map(|r| r.to_string()).collect();
    ensure!(
        table.chains == chains,
        "the chains of {NFT_FAMILY} {NFT_TABLE} differ from docs/design.md §6:\n{}",
        difference(&chains, &table.chains)
    );
    ensure!(
        table.rules == rules,
        "the rules of {NFT_FAMILY} {NFT_TABLE} differ from docs/design.md §6:\n{}",
        difference(&rules, &table.rules)
    );
    ensure!(
        table.other.is_empty(),
        "{NFT_FAMILY} {NFT_TABLE} holds more than chains and rules: {:?}",
        table.other
    );
    // Sets ignore duplicates: the objects must be exactly as many (apply twice adds nothing).
    ensure!(
        table.chain_objects == chains.len() && table.rule_objects == rules.len(),
        "{NFT_FAMILY} {NFT_TABLE} holds {} chains and {} rules, expected {} and {} (a duplicate?)",
        table.chain_objects,
        table.rule_objects,
        chains.len(),
        rules.len()
    );
    eprintln!(
        "==> nft table {NFT_FAMILY} {NFT_TABLE}: exactly 2 chains and {} rules",
        EXPECTED_RULES.len()
    );
    Ok(())
}

/// `- missing` and `+ unexpected` lines.
fn difference(expected: &BTreeSet<String>, seen: &BTreeSet<String>) -> String {
    expected
        .difference(seen)
        .map(|l| format!("- missing:    {l}\n"))
        .chain(seen.difference(expected).map(|l| format!("+ unexpected: {l}\n")))
        .collect()
}

/// Spec §6: the oneshot network unit is enabled and active, after `nftables.service` and before
/// the machine, and the machine's nspawn unit requires it and starts after it.
fn network_unit_sits_between_nftables_and_the_machine(
    node: &JoinedNode,
    machine: &str,
) -> anyhow::Result<()> {
    let nspawn = format!("systemd-nspawn@{machine}.service");
    let unit = unit_properties(
        &node.vm,
        None,
        NETWORK_UNIT,
        &[
            "LoadState",
            "UnitFileState",
            "ActiveState",
            "Type",
            "After",
            "Before",
        ],
    )?;
    let has = |key: &str, value: &str| unit.get(key).map(String::as_str) == Some(value);
    let lists = |key: &str, item: &str| {
        unit.get(key)
            .is_some_and(|v| v.split_whitespace().any(|w| w == item))
    };
    ensure!(
        has("LoadState", "loaded")
            && has("UnitFileState", "enabled")
            && has("ActiveState", "active")
            && has("Type", "oneshot")
            && lists("After", "nftables.service")
            && lists("Before", &nspawn),
        "{NETWORK_UNIT} is not a loaded, enabled, active oneshot after nftables.service and before \
         {nspawn}: {unit:?}"
    );
    let drop_in = host_state::nspawn_drop_in(machine);
    let nspawn_props = unit_properties(&node.vm, None, &nspawn, &["Requires", "After", "DropInPaths"])?;
    let nspawn_lists = |key: &str| {
        nspawn_props
            .get(key)
            .is_some_and(|v| v.split_whitespace().any(|w| w == NETWORK_UNIT))
    };
    ensure!(
        nspawn_lists("Requires")
            && nspawn_lists("After")
            && nspawn_props
                .get("DropInPaths")
                .is_some_and(|v| v.split_whitespace().any(|p| p == drop_in)),
        "{nspawn} does not require and follow {NETWORK_UNIT} through {drop_in}: {nspawn_props:?}"
    );
    Ok(())
}
