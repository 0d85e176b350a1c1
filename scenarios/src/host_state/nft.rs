//! nft tables as `nft -j list ...` reports them, turned into nft-like text without handles.

use std::collections::BTreeSet;

use anyhow::{Context, bail};
use harness::vm::Vm;
use serde_json::Value;

/// A table as `nft -j list table` reports it, each object as nft-like text without handles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NftTable {
    /// `<name>: type <type> hook <hook> priority <prio> policy <policy>`.
    pub chains: BTreeSet<String>,
    /// `<chain>: <expressions> comment "<comment>"`, e.g.
    /// `output: ip daddr 169.254.10.10 udp dport 53 notrack comment "..."`.
    pub rules: BTreeSet<String>,
    /// Anything else in the table (sets, maps, ...), as its JSON.
    pub other: BTreeSet<String>,
    /// How many chain and rule objects the table holds: a duplicate (e.g. an apply that
    /// appended its rules a second time) counts twice here but once in the sets.
    pub chain_objects: usize,
    pub rule_objects: usize,
}

/// One expression of a rule as nft writes it; what this reader does not know stays JSON, so an
/// unexpected expression shows up as a difference instead of being dropped.
fn expression_text(expr: &Value) -> String {
    if let Some(m) = expr.get("match") {
        let payload = &m["left"]["payload"];
        if let (Some(proto), Some(field)) = (payload["protocol"].as_str(), payload["field"].as_str()) {
            let right = match &m["right"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            return match m["op"].as_str() {
                Some("==") => format!("{proto} {field} {right}"),
                Some(op) => format!("{proto} {field} {op} {right}"),
                None => expr.to_string(),
            };
        }
    }
    match expr.as_object() {
        Some(obj) if obj.len() == 1 && obj.contains_key("notrack") => "notrack".into(),
        Some(obj) if obj.len() == 1 && obj.contains_key("counter") => "counter".into(),
        _ => expr.to_string(),
    }
}

/// Parses `nft -j list table <family> <name>` into the objects of that table.
pub fn parse_nft_table(json: &str, family: &str, name: &str) -> anyhow::Result<NftTable> {
    let doc: Value = serde_json::from_str(json).context("`nft -j` output is not JSON")?;
    let items = doc["nftables"]
        .as_array()
        .context("`nft -j` output without an `nftables` array")?;
    let ours = |obj: &Value| obj["family"].as_str() == Some(family) && obj["table"].as_str() == Some(name);
    let mut table = NftTable::default();
    for item in items {
        let Some((kind, obj)) = item.as_object().and_then(|o| o.iter().next()) else {
            bail!("an `nft -j` item that is not an object with one key: {item}");
        };
        match kind.as_str() {
            "metainfo" | "table" => {}
            "chain" if ours(obj) => {
                table.chain_objects += 1;
                table.chains.insert(format!(
                    "{}: type {} hook {} priority {} policy {}",
                    obj["name"].as_str().unwrap_or("?"),
                    obj["type"].as_str().unwrap_or("-"),
                    obj["hook"].as_str().unwrap_or("-"),
                    obj["prio"],
                    obj["policy"].as_str().unwrap_or("-"),
                ));
            }
            "rule" if ours(obj) => {
                let exprs: Vec<String> = obj["expr"]
                    .as_array()
                    .context("a rule without `expr`")?
                    .iter()
                    .map(expression_text)
                    .collect();
                let comment = obj["comment"]
                    .as_str()
                    .map(|c| format!(" comment \"{c}\""))
                    .unwrap_or_default();
                table.rule_objects += 1;
                table.rules.insert(format!(
                    "{}: {}{comment}",
                    obj["chain"].as_str().unwrap_or("?"),
                    exprs.join(" ")
                ));
            }
            _ => {
                let mut obj = obj.clone();
                if let Some(o) = obj.as_object_mut() {
                    o.remove("handle");
                }
                table.other.insert(format!("{kind} {obj}"));
            }
        }
    }
    Ok(table)
}

/// `family name` of every table in `nft -j list tables`.
pub fn parse_nft_tables(json: &str) -> anyhow::Result<BTreeSet<String>> {
    let doc: Value = serde_json::from_str(json).context("`nft -j` output is not JSON")?;
    let items = doc["nftables"]
        .as_array()
        .context("`nft -j` output without an `nftables` array")?;
    Ok(items
        .iter()
        .filter_map(|i| i.get("table"))
        .map(|t| {
            format!(
                "{} {}",
                t["family"].as_str().unwrap_or("?"),
                t["name"].as_str().unwrap_or("?")
            )
        })
        .collect())
}

/// Every nft table on the VM (`family name`). A failure to list is an error, never "none".
pub fn read_nft_tables(vm: &Vm) -> anyhow::Result<BTreeSet<String>> {
    parse_nft_tables(&vm.run("nft -j list tables")?)
}

/// The table `family name` on the VM, or `None` when `nft -j list tables` does not list it.
pub fn read_nft_table(vm: &Vm, family: &str, name: &str) -> anyhow::Result<Option<NftTable>> {
    if !read_nft_tables(vm)?.contains(&format!("{family} {name}")) {
        return Ok(None);
    }
    let json = vm.run(&format!("nft -j list table {family} {name}"))?;
    parse_nft_table(&json, family, name).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}}, {"table": {"family": "ip", "name": "unbounded_localdns", "handle": 7}}, {"chain": {"family": "ip", "table": "unbounded_localdns", "name": "prerouting", "handle": 1, "type": "filter", "hook": "prerouting", "prio": -300, "policy": "accept"}}, {"rule": {"family": "ip", "table": "unbounded_localdns", "chain": "prerouting", "handle": 3, "comment": "unbounded-localdns: skip conntrack", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "169.254.10.10"}}, {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 53}}, {"notrack": null}]}}, {"rule": {"family": "ip", "table": "unbounded_localdns", "chain": "prerouting", "handle": 4, "expr": [{"match": {"op": "!=", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 53}}, {"counter": {"packets": 3, "bytes": 9}}, {"accept": null}]}}, {"set": {"family": "ip", "name": "s", "table": "unbounded_localdns", "type": "ipv4_addr", "handle": 9}}]}"#;

    #[test]
    fn an_nft_table_reads_as_nft_like_text_without_handles() {
        let t = parse_nft_table(TABLE, "ip", "unbounded_localdns").unwrap();
        assert_eq!(
            t.chains,
            BTreeSet::from(["prerouting: type filter hook prerouting priority -300 policy accept".into()])
        );
        assert_eq!(
            t.rules,
            BTreeSet::from([
                "prerouting: ip daddr 169.254.10.10 udp dport 53 notrack comment \"unbounded-localdns: skip conntrack\""
                    .to_string(),
                "prerouting: tcp dport != 53 counter {\"accept\":null}".to_string(),
            ])
        );
        assert_eq!(t.other.len(), 1);
        assert!(t.other.iter().next().unwrap().starts_with("set "));
        assert!(!t.other.iter().next().unwrap().contains("handle"));
        assert_eq!((t.chain_objects, t.rule_objects), (1, 2));
    }

    #[test]
    fn a_rule_listed_twice_counts_twice_though_the_set_holds_it_once() {
        let rule = r#"{"rule": {"family": "ip", "table": "unbounded_localdns", "chain": "prerouting", "handle": 5, "expr": [{"notrack": null}]}}"#;
        let again = rule.replace("\"handle\": 5", "\"handle\": 6");
        let items = TABLE.strip_suffix("]}").expect("TABLE ends its array");
        let twice = format!("{items}, {rule}, {again}]}}");
        let t = parse_nft_table(&twice, "ip", "unbounded_localdns").unwrap();
        assert_eq!(t.rules.len(), 3);
        assert_eq!(t.rule_objects, 4);
    }

    #[test]
    fn nft_tables_list_as_family_and_name() {
        let tables = parse_nft_tables(TABLE).unwrap();
        assert_eq!(tables, BTreeSet::from(["ip unbounded_localdns".to_string()]));
        assert!(parse_nft_tables("{}").is_err());
    }
}
