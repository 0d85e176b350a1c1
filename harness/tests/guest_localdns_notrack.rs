//! NOTRACK really works, in a lab VM on Debian's kernel with the listeners on the
//! real `localdns` dummy link and our table applied by `agent::hostnet::apply`: under a burst of
//! queries to both listeners over UDP and TCP, from the node's own namespace (our `output` chain)
//! and from a peer namespace routed to the listeners (our `prerouting` chain, as pods' queries
//! arrive), conntrack (Debian's `conntrack` tool) holds no entry for traffic to or from the
//! listeners with `NOTRACKReplies` on; with it off, reply entries appear. Conntrack is made active
//! in the node namespace first, as any stateful firewall would. A guest test (the `guest_` binary
//! prefix): run by `harness/tests/lab_guest_tests.rs`.

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

use harness::localdns_live::*;

const CLIENT_SIDE: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 9);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 10);
const PER_KIND: usize = 25;

/// `result`'s value, or a panic with its error's message.
fn ok<T>(result: Result<T, LiveError>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `cmd`; its stdout, or a panic naming the command and its output.
fn run(cmd: &mut Command) -> String {
    agent::exec::run_stdout(cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// Conntrack entries in the node namespace for a listener address on any port — DNS and the
/// supervisor's `/ready` probes (port 8181), which our rules cover too — as `conntrack -L` lists
/// them.
fn listener_entries(lab: &Lab) -> Vec<String> {
    let out = run(lab.node.cmd("conntrack").arg("-L"));
    out.lines()
        .filter(|l| l.contains("169.254.10.10") || l.contains("169.254.10.11"))
        .map(str::to_owned)
        .collect()
}

/// How many of the supervisor's health checks must have run before the last listing.
const MIN_CHECKS: usize = 5;

/// The health checks the supervisor ran since `READY=1`, waiting (up to a minute) until there are
/// [`MIN_CHECKS`]: the watchdog pings queued on `notify` (`WATCHDOG=1`, one per passed check) and
/// the failed checks in its log. A failed check probed too — under TCG a probe often misses its
/// 200 ms, but its connection was opened all the same. Only the pings queued so far count: the
/// supervisor goes on pinging, and reading until it paused took up to two minutes under TCG.
fn checks_run(notify: &NotifySocket, supervisor: &Proc) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut passed = 0;
    loop {
        passed += ok(notify.queued())
            .iter()
            .filter(|m| m.contains("WATCHDOG=1"))
            .count();
        let failed = supervisor.log_text().matches("health check failed").count();
        if passed + failed >= MIN_CHECKS || Instant::now() >= deadline {
            return (passed, failed);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
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

/// Runs the burst from the node and then from a routed peer; returns the listener entries left.
fn entries_after_bursts(notrack_replies: bool) -> Bursts {
    let lab = ok(Lab::new(notrack_replies));
    let client = ok(Netns::new(
        "p",
        &format!("{}x{}", std::process::id() % 100_000, u8::from(notrack_replies)),
    ));
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
    ok(lab
        .node
        .run(&["ip", "addr", "add", &format!("{CLIENT_SIDE}/30"), "dev", &a]));
    ok(client.run(&["ip", "addr", "add", &format!("{CLIENT}/30"), "dev", &b]));
    ok(lab.node.run(&["ip", "link", "set", &a, "up"]));
    ok(client.run(&["ip", "link", "set", &b, "up"]));
    ok(client.run(&[
        "ip",
        "route",
        "add",
        "169.254.10.0/24",
        "via",
        &CLIENT_SIDE.to_string(),
    ]));
    // A stateful firewall makes conntrack run in the namespace.
    ok(lab.node.run(&["nft", "add table inet h6_stateful"]));
    ok(lab.node.run(&[
        "nft",
        "add chain inet h6_stateful input { type filter hook input priority 0; policy accept; }",
    ]));
    ok(lab.node.run(&[
        "nft",
        "add rule inet h6_stateful input ct state established,related accept",
    ]));

    let notify = ok(NotifySocket::bind(lab.dir.path()));
    // A watchdog of 1 s makes the supervisor check both listeners (`/ready` and a DNS query) every
    // 200 ms, so its probes run all through the bursts; a probe slower than its 200 ms under TCG
    // must not make it give up or take CoreDNS for hung, so both rules are relaxed.
    let supervisor = ok(lab.start_supervisor(
        &ok(lab.supervisor_env(&[
            ("WATCHDOG_USEC", "1000000"),
            ("LOCALDNS_FAILURE_THRESHOLD", "100000"),
            ("LOCALDNS_HUNG_AFTER_FAILED_CHECKS", "0"),
        ])),
        Some(&notify.path),
    ));
    notify
        .until("READY=1", Duration::from_secs(90))
        .unwrap_or_else(|seen| panic!("no READY: {seen:?}\n{}", lab.logs()));
    // Nothing from the supervisor's own checks may count: start from an empty table.
    run(lab.node.cmd("conntrack").arg("-F"));

    ok(lab.node.enter());
    let from_node = burst(&lab);
    let after_node = listener_entries(&lab);
    ok(client.enter());
    let from_peer = burst(&lab);
    std::thread::sleep(Duration::from_secs(1));
    // The probes of the checks counted here ran before the listing.
    let (passed, failed) = checks_run(&notify, &supervisor);
    let after_peer = listener_entries(&lab);
    let checks = passed + failed;
    assert!(
        checks >= MIN_CHECKS,
        "the supervisor ran only {checks} health checks by the last listing ({passed} passed), so \
         its probes were not shown to be untracked\n{}",
        lab.logs()
    );
    assert_eq!(from_node + from_peer, 2 * 2 * 2 * PER_KIND);
    // Positive control: conntrack does track in this namespace (a query from the node to the
    // upstream, which no rule of ours covers, leaves an entry), so zero entries mean NOTRACK.
    ok(lab.node.enter());
    query(UPSTREAM, "www.example.test", false).expect("the upstream answers the node");
    let all = run(lab.node.cmd("conntrack").arg("-L"));
    assert!(
        all.contains(&format!("dst={UPSTREAM}")),
        "conntrack is not active in the node namespace; entries:\n{all}"
    );
    let count = |entries: &[String], proto: &str| entries.iter().filter(|e| e.starts_with(proto)).count();
    eprintln!(
        "NOTRACKReplies={notrack_replies}: {} queries, {checks} supervisor checks ({passed} passed); listener \
         entries after the node's burst: {} ({} udp, {} tcp), after the peer's: {} ({} udp, {} tcp)",
        from_node + from_peer,
        after_node.len(),
        count(&after_node, "udp"),
        count(&after_node, "tcp"),
        after_peer.len(),
        count(&after_peer, "udp"),
        count(&after_peer, "tcp"),
    );
    Bursts {
        after_node,
        after_peer,
    }
}

/// Listener entries in conntrack after the burst from the node, and after the one from the peer.
struct Bursts {
    after_node: Vec<String>,
    after_peer: Vec<String>,
}

/// Entries of the listeners' replies (source a listener, port 53) to `client`.
fn replies_to(entries: &[String], client: &str) -> usize {
    entries
        .iter()
        .filter(|e| e.contains("sport=53") && e.contains("src=169.254.10.1") && e.contains(client))
        .count()
}

#[test]
fn with_reply_rules_no_conntrack_entry_exists_for_the_listeners() {
    let bursts = entries_after_bursts(true);
    assert!(
        bursts.after_node.is_empty(),
        "the node's own queries (output chain) left {} entries:\n{}",
        bursts.after_node.len(),
        bursts.after_node.join("\n")
    );
    assert!(
        bursts.after_peer.is_empty(),
        "the routed peer's queries (prerouting chain) left {} entries:\n{}",
        bursts.after_peer.len(),
        bursts.after_peer.join("\n")
    );
}

#[test]
fn with_request_rules_only_replies_leave_conntrack_entries() {
    let bursts = entries_after_bursts(false);
    // The node's queries come from a listener address itself; the peer's from CLIENT.
    assert!(
        replies_to(&bursts.after_node, "dst=169.254.10.1") > 0,
        "expected reply entries for the node's own queries without NOTRACKReplies; got:\n{}",
        bursts.after_node.join("\n")
    );
    assert!(
        replies_to(&bursts.after_peer, &format!("dst={CLIENT} ")) > 0,
        "expected reply entries for the peer's queries without NOTRACKReplies; got:\n{}",
        bursts.after_peer.join("\n")
    );
}
