//! The comparable model of our nft table: chains and rules without handles or counter values.
//!
//! [`desired`] builds it from a [`NetworkSpec`]; [`from_nft_json`] reads it from `nft -j list table`.
//! Two models are equal when the live table does what the rendered script asks for.

use serde_json::{Value, json};

use super::{NetworkSpec, RULE_COMMENT, TABLE_FAMILY, TABLE_NAME};

/// `priority raw` as nft reports it.
pub const PRIORITY_RAW: i64 = -300;

/// One base chain of the table.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Chain {
    pub name: String,
    pub kind: String,
    pub hook: String,
    pub prio: i64,
    pub policy: String,
}

/// One rule: its chain, its expressions (nft JSON, counter values zeroed) and its comment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    pub chain: String,
    pub expr: String,
    pub comment: Option<String>,
}

/// Our table as a value: chains and rules, each sorted, so order of listing does not matter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NftModel {
    pub chains: Vec<Chain>,
    pub rules: Vec<Rule>,
}

/// A `nft -j` document that is not what nft writes.
#[derive(Debug, thiserror::Error)]
#[error("unexpected `nft -j` output: {0}")]
pub struct ModelError(pub String);

impl NftModel {
    fn sorted(mut self) -> Self {
        self.chains.sort();
        self.rules.sort();
        self
    }
}

fn base_chain(name: &str, hook: &str) -> Chain {
    Chain {
        name: name.into(),
        kind: "filter".into(),
        hook: hook.into(),
        prio: PRIORITY_RAW,
        policy: "accept".into(),
    }
}

/// One rule of [`crate::render::host::notrack_rules_for`] (the one list both the script and this
/// model come from) as `nft -j` lists it: `ip <dir>addr <ip> <proto> <dir>port <port> notrack
/// comment "..."`.
fn listed(rule: &crate::render::host::NotrackRule) -> Rule {
    let (addr_field, port_field) = if rule.reply {
        ("saddr", "sport")
    } else {
        ("daddr", "dport")
    };
    let expr = json!([
        {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": addr_field}}, "right": rule.listener.to_string()}},
        {"match": {"op": "==", "left": {"payload": {"protocol": rule.protocol, "field": port_field}}, "right": rule.port}},
        {"notrack": null}
    ]);
    Rule {
        chain: rule.chain.into(),
        expr: expr.to_string(),
        comment: Some(RULE_COMMENT.into()),
    }
}

/// The table docs/design.md §6 asks for: two raw-priority base chains, 8 DNS request rules, with
/// `notrack_replies` 4 DNS reply rules in `output`, and 4 `output` rules for the supervisor's
/// `/ready` probes — the same rules the `.nft` script is written from.
pub fn desired(spec: &NetworkSpec) -> NftModel {
    let rules = crate::render::host::notrack_rules_for(spec.listeners(), spec.notrack_replies)
        .iter()
        .map(listed)
        .collect();
    NftModel {
        chains: vec![
            base_chain("prerouting", "prerouting"),
            base_chain("output", "output"),
        ],
        rules,
    }
    .sorted()
}

/// Zeroes what changes by itself: counter values.
fn normalize_expr(expr: &Value) -> Value {
    match expr {
        Value::Array(items) => Value::Array(items.iter().map(normalize_expr).collect()),
        Value::Object(map) if map.contains_key("counter") && map.len() == 1 => json!({"counter": null}),
        other => other.clone(),
    }
}

fn str_field<'a>(obj: &'a Value, key: &str, what: &str) -> Result<&'a str, ModelError> {
    obj.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ModelError(format!("{what} without a string `{key}`: {obj}")))
}

/// Reads our table from the output of `nft -j list table ip unbounded_localdns`.
/// Objects of other tables (there should be none) are ignored; handles are dropped.
pub fn from_nft_json(text: &str) -> Result<NftModel, ModelError> {
    let doc: Value = serde_json::from_str(text).map_err(|e| ModelError(format!("not JSON: {e}")))?;
    let items = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or_else(|| ModelError("no `nftables` array".into()))?;
    let mut model = NftModel::default();
    let ours = |obj: &Value| {
        obj.get("family").and_then(Value::as_str) == Some(TABLE_FAMILY)
            && obj.get("table").and_then(Value::as_str) == Some(TABLE_NAME)
    };
    for item in items {
        if let Some(chain) = item.get("chain").filter(|c| ours(c)) {
            // A regular (non-base) chain has no hook; keep it visible as a difference.
            model.chains.push(Chain {
                name: str_field(chain, "name", "chain")?.into(),
                kind: chain.get("type").and_then(Value::as_str).unwrap_or("").into(),
                hook: chain.get("hook").and_then(Value::as_str).unwrap_or("").into(),
                prio: chain.get("prio").and_then(Value::as_i64).unwrap_or(0),
                policy: chain.get("policy").and_then(Value::as_str).unwrap_or("").into(),
            });
        } else if let Some(rule) = item.get("rule").filter(|r| ours(r)) {
            let expr = rule
                .get("expr")
                .ok_or_else(|| ModelError(format!("rule without `expr`: {rule}")))?;
            model.rules.push(Rule {
                chain: str_field(rule, "chain", "rule")?.into(),
                expr: normalize_expr(expr).to_string(),
                comment: rule.get("comment").and_then(Value::as_str).map(str::to_owned),
            });
        } else if let Some(other) = item.get("set").or_else(|| item.get("map")).filter(|s| ours(s)) {
            // Sets or maps are never ours to have: show them as a rule that cannot match.
            model.rules.push(Rule {
                chain: String::new(),
                expr: other.to_string(),
                comment: None,
            });
        }
    }
    Ok(model.sorted())
}

/// Whether `nft -j list tables` output lists our table.
pub fn tables_include_ours(text: &str) -> Result<bool, ModelError> {
    let doc: Value = serde_json::from_str(text).map_err(|e| ModelError(format!("not JSON: {e}")))?;
    let items = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or_else(|| ModelError("no `nftables` array".into()))?;
    Ok(items.iter().filter_map(|i| i.get("table")).any(|t| {
        t.get("family").and_then(Value::as_str) == Some(TABLE_FAMILY)
            && t.get("name").and_then(Value::as_str) == Some(TABLE_NAME)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(notrack_replies: bool) -> NetworkSpec {
        NetworkSpec {
            node_listener: "169.254.10.10".parse().unwrap(),
            cluster_listener: "169.254.10.11".parse().unwrap(),
            notrack_replies,
        }
    }

    /// Output of `nft -j list table ip unbounded_localdns` (nft 1.0.6) for one rule with a counter.
    const LISTED: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
      {"table": {"family": "ip", "name": "unbounded_localdns", "handle": 2}},
      {"chain": {"family": "ip", "table": "unbounded_localdns", "name": "output", "handle": 2, "type": "filter", "hook": "output", "prio": -300, "policy": "accept"}},
      {"rule": {"family": "ip", "table": "unbounded_localdns", "chain": "output", "handle": 5, "comment": "unbounded-localdns: skip conntrack", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "169.254.10.10"}}, {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "sport"}}, "right": 53}}, {"counter": {"packets": 7, "bytes": 900}}, {"notrack": null}]}}]}"#;

    /// How a port match reads in a rule's (normalised, key-sorted) expression.
    const DPORT: &str = "\"field\":\"dport\"";
    const SPORT: &str = "\"field\":\"sport\"";

    /// The rules of `model` whose expression holds every one of `parts`.
    fn with<'a>(model: &'a NftModel, parts: &[&str]) -> Vec<&'a Rule> {
        model
            .rules
            .iter()
            .filter(|r| parts.iter().all(|p| r.expr.contains(p)))
            .collect()
    }

    #[test]
    fn desired_has_eight_dns_request_rules_and_the_probe_rules_without_replies() {
        let model = desired(&spec(false));
        assert_eq!(model.rules.len(), 12);
        assert_eq!(with(&model, &[DPORT, "\"right\":53}"]).len(), 8);
        assert!(with(&model, &[SPORT, "\"right\":53}"]).is_empty());
        assert_eq!(model.chains.len(), 2);
        assert!(
            model
                .chains
                .iter()
                .all(|c| c.prio == PRIORITY_RAW && c.policy == "accept")
        );
    }

    #[test]
    fn desired_adds_four_dns_reply_rules_in_output_with_replies() {
        let model = desired(&spec(true));
        let replies = with(&model, &[SPORT, "\"right\":53}"]);
        assert_eq!(model.rules.len(), 16);
        assert_eq!(replies.len(), 4);
        assert!(replies.iter().all(|r| r.chain == "output"));
    }

    #[test]
    fn the_ready_probe_is_untracked_both_ways_in_output_for_each_listener() {
        for notrack_replies in [false, true] {
            let model = desired(&spec(notrack_replies));
            let probes = with(&model, &["\"right\":8181}"]);
            assert_eq!(probes.len(), 4, "{probes:?}");
            assert!(probes.iter().all(|r| r.chain == "output"));
            for (field, port) in [("\"field\":\"daddr\"", DPORT), ("\"field\":\"saddr\"", SPORT)] {
                for ip in ["\"169.254.10.10\"", "\"169.254.10.11\""] {
                    let parts = [field, ip, port, "\"protocol\":\"tcp\"", "\"right\":8181}"];
                    assert_eq!(with(&model, &parts).len(), 1, "{field} {ip}: {probes:?}");
                }
            }
        }
    }

    #[test]
    fn listed_table_ignores_handles_and_counter_values() {
        let a = from_nft_json(LISTED).unwrap();
        let b = from_nft_json(&LISTED.replace("\"handle\": 5", "\"handle\": 9").replace("7", "0")).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.rules.len(), 1);
        assert_eq!(a.chains[0].hook, "output");
    }

    #[test]
    fn listed_rule_differs_from_desired_when_its_address_differs() {
        let listed =
            from_nft_json(&LISTED.replace(r#", {"counter": {"packets": 7, "bytes": 900}}"#, "")).unwrap();
        let wanted = desired(&spec(true));
        assert!(wanted.rules.contains(&listed.rules[0]), "{listed:?}");
        let other = from_nft_json(&LISTED.replace("169.254.10.10", "169.254.10.12")).unwrap();
        assert!(!wanted.rules.contains(&other.rules[0]));
    }

    #[test]
    fn tables_listing_finds_only_our_family_and_name() {
        let ours =
            r#"{"nftables": [{"table": {"family": "ip", "name": "unbounded_localdns", "handle": 1}}]}"#;
        let inet =
            r#"{"nftables": [{"table": {"family": "inet", "name": "unbounded_localdns", "handle": 1}}]}"#;
        assert!(tables_include_ours(ours).unwrap());
        assert!(!tables_include_ours(inet).unwrap());
        assert!(tables_include_ours("Error").is_err());
    }
}
