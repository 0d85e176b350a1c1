//! The nft half of the host network, run on any root host with nftables, each test in a fresh
//! network namespace: rendered script, live table and model agree; replace is atomic and idempotent;
//! reset removes the table; failing to list tables is an error. (The dummy link needs Debian's kernel:
//! see `guest_hostnet.rs`.)

mod hostnet_support;

use std::process::Command;

use agent::hostnet::model::{self, PRIORITY_RAW};
use agent::hostnet::plan::{self, Observed, Step};
use agent::hostnet::{apply, nft};
use hostnet_support::*;

#[test]
fn rendered_script_gives_the_designed_table_with_reply_rules() {
    fresh_netns();
    nft::replace_table(&script(true)).unwrap();
    let live = nft::read_table().unwrap().expect("table exists after replace");
    assert_eq!(
        live,
        model::desired(&spec(true)),
        "live table differs from the model:\n{}",
        rules_text()
    );
    // Straight from `nft -j`, not through the model: 4 DNS request rules in prerouting; in output
    // 4 DNS requests + 4 DNS replies + 4 for the `/ready` probe.
    assert_eq!(rule_count("prerouting"), 4, "{}", rules_text());
    assert_eq!(rule_count("output"), 12, "{}", rules_text());
    for chain in &live.chains {
        assert_eq!(
            (chain.kind.as_str(), chain.prio, chain.policy.as_str()),
            ("filter", PRIORITY_RAW, "accept")
        );
    }
}

#[test]
fn rendered_script_without_replies_has_agentbakers_eight_dns_rules_and_the_probe_rules() {
    fresh_netns();
    nft::replace_table(&script(false)).unwrap();
    assert_eq!(
        nft::read_table().unwrap(),
        Some(model::desired(&spec(false))),
        "{}",
        rules_text()
    );
    let text = rules_text();
    assert_eq!(
        text.matches(" dport 53 notrack").count(),
        8,
        "AgentBaker's 8 DNS request rules:\n{text}"
    );
    assert!(
        !text.contains("sport 53"),
        "no DNS reply rules without NOTRACKReplies:\n{text}"
    );
    assert_eq!(
        text.matches("tcp dport 8181 notrack").count() + text.matches("tcp sport 8181 notrack").count(),
        4,
        "the /ready probe's rules:\n{text}"
    );
    assert_eq!(
        text.matches("comment \"unbounded-localdns: skip conntrack\"")
            .count(),
        12,
        "{text}"
    );
}

#[test]
fn replacing_twice_keeps_one_copy_and_then_plans_nothing_for_the_table() {
    fresh_netns();
    nft::replace_table(&script(true)).unwrap();
    nft::replace_table(&script(true)).unwrap();
    assert_eq!(rule_count("output"), 12, "{}", rules_text());
    let desired = apply::desired(&spec(true));
    let observed = Observed {
        link: None,
        table: nft::read_table().unwrap(),
    };
    let steps = plan::plan(&observed, &desired).unwrap();
    assert!(!steps.contains(&Step::ReplaceTable), "{steps:?}");
}

#[test]
fn tampered_table_is_seen_as_different_and_replaced_back() {
    fresh_netns();
    nft::replace_table(&script(true)).unwrap();
    run(Command::new("nft").args([
        "add",
        "rule",
        "ip",
        "unbounded_localdns",
        "output",
        "ip",
        "daddr",
        "169.254.10.10",
        "tcp",
        "dport",
        "53",
        "accept",
    ]));
    let tampered = nft::read_table().unwrap();
    assert_ne!(tampered, Some(model::desired(&spec(true))));
    nft::replace_table(&script(true)).unwrap();
    assert_eq!(
        nft::read_table().unwrap(),
        Some(model::desired(&spec(true))),
        "{}",
        rules_text()
    );
}

#[test]
fn switching_replies_off_replaces_the_table_without_reply_rules() {
    fresh_netns();
    nft::replace_table(&script(true)).unwrap();
    let with = nft::read_table().unwrap();
    assert_ne!(with, Some(model::desired(&spec(false))));
    nft::replace_table(&script(false)).unwrap();
    // 4 DNS requests and the 4 probe rules; the 4 DNS replies are gone.
    assert_eq!(rule_count("output"), 8, "{}", rules_text());
    assert!(!rules_text().contains("sport 53"), "{}", rules_text());
}

#[test]
fn new_handles_after_a_replace_do_not_count_as_a_difference() {
    fresh_netns();
    nft::replace_table(&script(false)).unwrap();
    let before = nft::read_table().unwrap().unwrap();
    nft::replace_table(&script(false)).unwrap();
    let after = nft::read_table().unwrap().unwrap();
    assert_eq!(before, after, "handles changed by the replace must not matter");
}

#[test]
fn absent_table_reads_as_none_and_delete_reports_absent() {
    fresh_netns();
    assert_eq!(nft::read_table().unwrap(), None);
    assert!(!nft::delete_table().unwrap());
    nft::replace_table(&script(true)).unwrap();
    assert!(nft::delete_table().unwrap());
    assert!(!rules_text().contains("unbounded_localdns"));
}

#[test]
fn other_tables_are_left_alone() {
    fresh_netns();
    run(Command::new("nft").args(["add", "table", "inet", "someone_else"]));
    nft::replace_table(&script(true)).unwrap();
    nft::delete_table().unwrap();
    assert!(
        rules_text().contains("table inet someone_else"),
        "{}",
        rules_text()
    );
}
