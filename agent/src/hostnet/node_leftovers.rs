//! What the node's own processes leave in the host's network namespace, which the machine shares:
//! the CNI bridge (`cni0`), the iptables-nft chains of kubelet, kube-proxy and the CNI plugins
//! (`KUBE-*`, `CNI-*`) with the rules of other chains that jump to them, and the tables of
//! kube-proxy's nftables mode (`ip kube-proxy`, `ip6 kube-proxy`, which it owns whole). `reset`
//! removes them after the machines stopped; a table of iptables-nft is deleted only when it held
//! such chains and nothing else is left in it, so an operator's own tables and chains stay
//! (docs/lifecycle.md, "reset").

use std::collections::BTreeSet;
use std::io::Write;
use std::process::Command;

use serde_json::{Value, json};

use super::ResetReport;
use crate::exec;

/// Chains the node's processes create: kubelet and kube-proxy (`KUBE-`), the CNI plugins (`CNI-`).
pub fn is_node_chain(name: &str) -> bool {
    name.starts_with("KUBE-") || name.starts_with("CNI-")
}

/// A table: (family, name).
pub type Table = (String, String);

/// The tables kube-proxy's nftables mode creates and owns whole.
pub const KUBE_PROXY_TABLES: [(&str, &str); 2] = [("ip", "kube-proxy"), ("ip6", "kube-proxy")];

/// The tables of [`KUBE_PROXY_TABLES`] present in a ruleset (`nft -j list ruleset`).
pub fn kube_proxy_tables(ruleset: &Value) -> Vec<Table> {
    let items = ruleset["nftables"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .filter_map(|item| item.get("table"))
        .map(|t| table_of(t, "name"))
        .filter(|(f, n)| KUBE_PROXY_TABLES.contains(&(f.as_str(), n.as_str())))
        .collect()
}

/// The commands that take the node's chains out of a ruleset (`nft -j list ruleset`), as one
/// JSON batch for `nft -j -f` (no quoting of names): rules of other chains jumping to them, then
/// the chains themselves; and the tables that held them (deleted later if left empty).
pub fn removal_commands(ruleset: &Value) -> (Vec<Value>, BTreeSet<Table>) {
    let items = ruleset["nftables"].as_array().cloned().unwrap_or_default();
    let mut chains = Vec::new();
    let mut tables = BTreeSet::new();
    for item in &items {
        if let Some(c) = item.get("chain")
            && let (Some(f), Some(t), Some(n)) =
                (c["family"].as_str(), c["table"].as_str(), c["name"].as_str())
            && is_node_chain(n)
        {
            chains.push(json!({"family": f, "table": t, "name": n}));
            tables.insert((f.to_string(), t.to_string()));
        }
    }
    let mut commands = Vec::new();
    for item in &items {
        if let Some(r) = item.get("rule")
            && let (Some(f), Some(t), Some(c), Some(h)) = (
                r["family"].as_str(),
                r["table"].as_str(),
                r["chain"].as_str(),
                r["handle"].as_u64(),
            )
            && !is_node_chain(c)
            && jumps_to_node_chain(&r["expr"])
        {
            commands.push(json!({"delete": {"rule": {"family": f, "table": t, "chain": c, "handle": h}}}));
        }
    }
    commands.extend(chains.iter().map(|c| json!({"flush": {"chain": c}})));
    commands.extend(chains.iter().map(|c| json!({"delete": {"chain": c}})));
    (commands, tables)
}

/// Whether an expression (at any depth: verdict maps too) jumps or goes to a node chain.
fn jumps_to_node_chain(expr: &Value) -> bool {
    match expr {
        Value::Object(map) => map.iter().any(|(key, value)| {
            ((key == "jump" || key == "goto") && value["target"].as_str().is_some_and(is_node_chain))
                || jumps_to_node_chain(value)
        }),
        Value::Array(values) => values.iter().any(jumps_to_node_chain),
        _ => false,
    }
}

/// The tables among `candidates` with no rule left in any chain (`nft -j list ruleset`).
pub fn empty_tables(ruleset: &Value, candidates: &BTreeSet<Table>) -> Vec<Table> {
    let items = ruleset["nftables"].as_array().cloned().unwrap_or_default();
    let mut present = BTreeSet::new();
    let mut with_rules = BTreeSet::new();
    for item in &items {
        if let Some(t) = item.get("table") {
            present.insert(table_of(t, "name"));
        }
        if let Some(r) = item.get("rule") {
            with_rules.insert(table_of(r, "table"));
        }
    }
    candidates
        .iter()
        .filter(|t| present.contains(*t) && !with_rules.contains(*t))
        .cloned()
        .collect()
}

fn table_of(item: &Value, name_key: &str) -> Table {
    let s = |k: &str| item[k].as_str().unwrap_or_default().to_string();
    (s("family"), s(name_key))
}

fn ruleset() -> Result<Value, String> {
    let text = exec::run_stdout(Command::new("nft").args(["-j", "list", "ruleset"]))
        .map_err(|e| format!("{e:#}"))?;
    serde_json::from_str(&text).map_err(|e| format!("nft -j list ruleset printed no JSON: {e}"))
}

fn nft_batch(commands: Vec<Value>) -> Result<(), String> {
    let mut file = tempfile::NamedTempFile::new().map_err(|e| format!("a temporary nft batch: {e}"))?;
    file.write_all(json!({ "nftables": commands }).to_string().as_bytes())
        .map_err(|e| format!("writing a temporary nft batch: {e}"))?;
    exec::run(Command::new("nft").args(["-j", "-f"]).arg(file.path()))
        .map(drop)
        .map_err(|e| format!("{e:#}"))
}

/// Whether the CNI bridge exists in this process's network namespace (asked of the kernel:
/// `/sys/class/net` shows the namespace sysfs was mounted in).
fn bridge_exists() -> bool {
    exec::run(Command::new("ip").args(["-o", "link", "show", "dev", crate::render::cni::BRIDGE])).is_ok()
}

/// What [`remove`] would remove now (for `reset --dry-run`).
pub fn plan() -> Vec<String> {
    let mut out = Vec::new();
    if std::path::Path::new("/sys/class/net")
        .join(crate::render::cni::BRIDGE)
        .exists()
    {
        out.push(format!("delete link {}", crate::render::cni::BRIDGE));
    }
    if let Ok(rules) = ruleset() {
        for (family, table) in kube_proxy_tables(&rules) {
            out.push(format!("delete nft table {family} {table} (kube-proxy's)"));
        }
        let (commands, tables) = removal_commands(&rules);
        if !commands.is_empty() {
            let names: Vec<String> = tables.iter().map(|(f, t)| format!("{f} {t}")).collect();
            out.push(format!(
                "delete the KUBE-*/CNI-* chains in nft tables {} (and the tables if then empty)",
                names.join(", ")
            ));
        }
    }
    out
}

/// Removes the CNI bridge and the node's chains (and the tables they leave empty), recording
/// what went and what could not in `report`. Running it again finds nothing.
pub fn remove(report: &mut ResetReport) {
    let bridge = crate::render::cni::BRIDGE;
    if bridge_exists() {
        match exec::run(Command::new("ip").args(["link", "delete", bridge])) {
            Ok(_) => report.removed.push(format!("link {bridge}")),
            Err(e) => report.failed.push((format!("link {bridge}"), format!("{e:#}"))),
        }
    }
    let rules = match ruleset() {
        Ok(rules) => rules,
        Err(e) => {
            report.failed.push(("the node's nft chains".into(), e));
            return;
        }
    };
    for (family, table) in kube_proxy_tables(&rules) {
        let what = format!("nft table {family} {table}");
        match exec::run(Command::new("nft").args(["delete", "table", &family, &table])) {
            Ok(_) => report.removed.push(what),
            Err(e) => report.failed.push((what, format!("{e:#}"))),
        }
    }
    let (commands, tables) = removal_commands(&rules);
    if commands.is_empty() {
        return;
    }
    if let Err(e) = nft_batch(commands) {
        report
            .failed
            .push(("the node's nft chains (KUBE-*, CNI-*)".into(), e));
        return;
    }
    report
        .removed
        .push("the node's nft chains (KUBE-*, CNI-*)".into());
    let after = match ruleset() {
        Ok(after) => after,
        Err(e) => {
            report.failed.push(("the node's nft tables".into(), e));
            return;
        }
    };
    for (family, table) in empty_tables(&after, &tables) {
        let what = format!("nft table {family} {table}");
        match exec::run(Command::new("nft").args(["delete", "table", &family, &table])) {
            Ok(_) => report.removed.push(what),
            Err(e) => report.failed.push((what, format!("{e:#}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ruleset(items: Value) -> Value {
        serde_json::json!({ "nftables": items })
    }

    #[test]
    fn kube_proxys_own_tables_are_found_and_no_other() {
        let rules = ruleset(serde_json::json!([
            {"table": {"family": "ip", "name": "kube-proxy", "handle": 1}},
            {"table": {"family": "ip6", "name": "kube-proxy", "handle": 2}},
            {"table": {"family": "inet", "name": "kube-proxy", "handle": 3}},
            {"table": {"family": "ip", "name": "unbounded_localdns", "handle": 4}},
            {"chain": {"family": "ip", "table": "kube-proxy", "name": "services", "handle": 5}}
        ]));
        assert_eq!(
            kube_proxy_tables(&rules),
            vec![
                ("ip".to_string(), "kube-proxy".to_string()),
                ("ip6".to_string(), "kube-proxy".to_string())
            ]
        );
    }

    #[test]
    fn the_batch_deletes_jumps_to_node_chains_then_the_chains_and_nothing_else() {
        let rules = ruleset(serde_json::json!([
            {"table": {"family": "ip", "name": "filter", "handle": 1}},
            {"chain": {"family": "ip", "table": "filter", "name": "INPUT", "handle": 1, "hook": "input"}},
            {"chain": {"family": "ip", "table": "filter", "name": "KUBE-FIREWALL", "handle": 2}},
            {"chain": {"family": "ip", "table": "nat", "name": "CNI-abc", "handle": 3}},
            {"rule": {"family": "ip", "table": "filter", "chain": "INPUT", "handle": 7,
                      "expr": [{"counter": null}, {"jump": {"target": "KUBE-FIREWALL"}}]}},
            {"rule": {"family": "ip", "table": "filter", "chain": "INPUT", "handle": 8,
                      "expr": [{"match": {"right": 22}}, {"accept": null}]}},
            {"rule": {"family": "ip", "table": "filter", "chain": "INPUT", "handle": 9,
                      "expr": [{"vmap": {"data": {"set": [[1, {"goto": {"target": "CNI-x"}}]]}}}]}},
            {"rule": {"family": "ip", "table": "filter", "chain": "KUBE-FIREWALL", "handle": 10,
                      "expr": [{"jump": {"target": "KUBE-OTHER"}}]}}
        ]));
        let (commands, tables) = removal_commands(&rules);
        let rule = |h: u64| json!({"delete": {"rule": {"family": "ip", "table": "filter", "chain": "INPUT", "handle": h}}});
        let firewall = json!({"family": "ip", "table": "filter", "name": "KUBE-FIREWALL"});
        let cni = json!({"family": "ip", "table": "nat", "name": "CNI-abc"});
        assert_eq!(
            commands,
            vec![
                rule(7),
                rule(9),
                json!({"flush": {"chain": firewall}}),
                json!({"flush": {"chain": cni}}),
                json!({"delete": {"chain": firewall}}),
                json!({"delete": {"chain": cni}}),
            ]
        );
        assert_eq!(
            tables,
            BTreeSet::from([("ip".into(), "filter".into()), ("ip".into(), "nat".into())])
        );
    }

    #[test]
    fn only_candidate_tables_without_rules_are_empty() {
        let rules = ruleset(serde_json::json!([
            {"table": {"family": "ip", "name": "filter"}},
            {"table": {"family": "ip", "name": "nat"}},
            {"table": {"family": "ip", "name": "operator"}},
            {"chain": {"family": "ip", "table": "filter", "name": "INPUT"}},
            {"rule": {"family": "ip", "table": "nat", "chain": "POSTROUTING", "handle": 1, "expr": []}}
        ]));
        let candidates = BTreeSet::from([
            ("ip".to_string(), "filter".to_string()),
            ("ip".to_string(), "nat".to_string()),
            ("ip6".to_string(), "gone".to_string()),
        ]);
        assert_eq!(
            empty_tables(&rules, &candidates),
            vec![("ip".to_string(), "filter".to_string())]
        );
    }
}
