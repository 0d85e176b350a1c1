//! NOTRACK really works (issue 6 item 7): under a burst of queries to both listeners over UDP and
//! TCP, from the node's own namespace (our `output` chain) and from a peer namespace routed to the
//! listeners (our `prerouting` chain, as pods' queries arrive), conntrack holds no entry for traffic
//! to or from the listeners with `NOTRACKReplies` on; with it off, reply entries appear.
//! Conntrack is made active in the node namespace first, as any stateful firewall would.

mod localdns_live_support;

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use localdns_live_support::*;

const CLIENT_SIDE: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 9);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 10);
const PER_KIND: usize = 25;

/// Conntrack entries in the node namespace that involve a listener, as `conntrack -L` lists them.
fn listener_entries(lab: &Lab) -> Vec<String> {
    let out = run(lab.node.cmd("conntrack").arg("-L"));
    out.lines()
        .filter(|l| l.contains("169.254.10.10") || l.contains("169.254.10.11"))
        .map(str::to_owned)
        .collect()
}

fn burst(lab: &Lab) -> usize {
    let mut answered = 0;
    for (listener, name) in [
        (NODE, "www.example.test"),
        (CLUSTER, "kubernetes.default.svc.cluster.local"),
    ] {
        for tcp in [false, true] {
            for _ in 0..PER_KIND {
                match query(listener, name, tcp) {
                    Ok(a) if !a.a.is_empty() => answered += 1,
                    other => panic!(
                        "query {name} to {listener} (tcp {tcp}): {other:?}\n{}",
                        lab.logs()
                    ),
                }
            }
        }
    }
    answered
}

/// Runs the burst from the node and from a routed peer; returns the listener entries left.
fn entries_after_burst(notrack_replies: bool) -> Vec<String> {
    let lab = Lab::new(notrack_replies);
    let client = Netns::new(
        "p",
        &format!("{}x{}", std::process::id() % 100_000, u8::from(notrack_replies)),
    );
    let (a, b) = (
        format!("vp{}a", lab.node.name.trim_start_matches("h6n")),
        format!("vp{}b", lab.node.name.trim_start_matches("h6n")),
    );
    run(Command::new("ip").args([
        "link",
        "add",
        &a,
        "netns",
        &lab.node.name,
        "type",
        "veth",
        "peer",
        "name",
        &b,
        "netns",
        &client.name,
    ]));
    lab.node
        .run(&["ip", "addr", "add", &format!("{CLIENT_SIDE}/30"), "dev", &a]);
    client.run(&["ip", "addr", "add", &format!("{CLIENT}/30"), "dev", &b]);
    lab.node.run(&["ip", "link", "set", &a, "up"]);
    client.run(&["ip", "link", "set", &b, "up"]);
    client.run(&[
        "ip",
        "route",
        "add",
        "169.254.10.0/24",
        "via",
        &CLIENT_SIDE.to_string(),
    ]);
    // A stateful firewall makes conntrack run in the namespace.
    lab.node.run(&["nft", "add table inet h6_stateful"]);
    lab.node.run(&[
        "nft",
        "add chain inet h6_stateful input { type filter hook input priority 0; policy accept; }",
    ]);
    lab.node.run(&[
        "nft",
        "add rule inet h6_stateful input ct state established,related accept",
    ]);

    let notify = NotifySocket::bind(lab.dir.path());
    let _supervisor = lab.start_supervisor(&lab.supervisor_env(&[]), Some(&notify.path));
    notify
        .until("READY=1", Duration::from_secs(60))
        .unwrap_or_else(|seen| panic!("no READY: {seen:?}\n{}", lab.logs()));
    // Nothing from the supervisor's own checks may count: start from an empty table.
    run(lab.node.cmd("conntrack").arg("-F"));

    lab.node.enter();
    let from_node = burst(&lab);
    client.enter();
    let from_peer = burst(&lab);
    assert_eq!(from_node + from_peer, 2 * 2 * 2 * PER_KIND);
    let entries = listener_entries(&lab);
    eprintln!(
        "NOTRACKReplies={notrack_replies}: {} queries, {} conntrack entries for the listeners ({} udp, {} tcp)",
        from_node + from_peer,
        entries.len(),
        entries.iter().filter(|e| e.starts_with("udp")).count(),
        entries.iter().filter(|e| e.starts_with("tcp")).count()
    );
    entries
}

#[test]
fn with_reply_rules_no_conntrack_entry_exists_for_the_listeners() {
    let entries = entries_after_burst(true);
    assert!(
        entries.is_empty(),
        "{} entries:\n{}",
        entries.len(),
        entries.join("\n")
    );
}

#[test]
fn with_request_rules_only_replies_leave_conntrack_entries() {
    let entries = entries_after_burst(false);
    let replies = entries
        .iter()
        .filter(|e| e.contains("sport=53") && e.contains("src=169.254.10.1"))
        .count();
    assert!(
        replies > 0,
        "expected reply entries without NOTRACKReplies; got:\n{}",
        entries.join("\n")
    );
}
