//! The live LocalDNS data path in a lab VM, each case in fresh network namespaces with the
//! `localdns` dummy link and our nft table made by `agent::hostnet::apply`, and the real CoreDNS
//! run by the real supervisor from the Corefile and environment file the agent renders. A guest
//! test (the `guest_` binary prefix): run by `harness/tests/lab_guest_tests.rs`,
//! which copies CoreDNS from the lab cache into the VM (`$LOCALDNS_TEST_COREDNS`).

use std::time::{Duration, Instant};

use harness::localdns_live::*;
use hickory_proto::op::ResponseCode;

/// `result`'s value, or a panic with its error's message.
fn ok<T>(result: Result<T, LiveError>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `cmd`; its stdout, or a panic naming the command and its output.
fn run(cmd: &mut std::process::Command) -> String {
    agent::exec::run_stdout(cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// A lab whose supervisor has reported READY on the test's notify socket.
fn ready_lab(extra_env: &[(&str, &str)]) -> (Lab, Proc, NotifySocket) {
    let lab = ok(Lab::new(true));
    let notify = ok(NotifySocket::bind(lab.dir.path()));
    let env = ok(lab.supervisor_env(extra_env));
    let supervisor = ok(lab.start_supervisor(&env, Some(&notify.path)));
    if let Err(seen) = notify.until("READY=1", Duration::from_secs(90)) {
        panic!("no READY=1 within 90 s; messages: {seen:?}\n{}", lab.logs());
    }
    ok(lab.node.enter());
    (lab, supervisor, notify)
}

#[test]
fn node_listener_answers_upstream_names_and_serves_repeats_from_cache() {
    let (lab, _supervisor, _notify) = ready_lab(&[]);
    let first = query(NODE, "www.example.test", false).unwrap();
    assert_eq!(
        first,
        Answer {
            rcode: ResponseCode::NoError,
            a: vec!["192.0.2.80".parse().unwrap()]
        },
        "{}",
        lab.logs()
    );
    // Only A queries: the `loop` plugin's startup probe (HINFO, retried while a slow VM times
    // it out) reaches the upstream too, at any moment of the first seconds (CI saw it).
    let upstream_a = || {
        metric_sum_with_label(
            &ok(metrics(UPSTREAM_METRICS)),
            "coredns_dns_requests_total",
            "type=\"A\"",
        )
    };
    // The first query's forward may have been retried on a slow VM (CoreDNS's `forward` tries
    // again after its own timeout); that retry reaches the upstream late. Wait until the count
    // holds still for a second (at most 10 s) before the repeats are counted.
    let mut upstream_before = upstream_a();
    for _ in 0..10 {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let now = upstream_a();
        if now == upstream_before {
            break;
        }
        upstream_before = now;
    }
    let hits_before = metric_sum(&ok(metrics(METRICS)), "coredns_cache_hits_total");
    for tcp in [false, true, false] {
        assert_eq!(query(NODE, "www.example.test", tcp).unwrap(), first);
    }
    let upstream_after = upstream_a();
    let hits_after = metric_sum(&ok(metrics(METRICS)), "coredns_cache_hits_total");
    assert_eq!(
        upstream_after, upstream_before,
        "repeats must not reach the upstream"
    );
    assert!(upstream_before >= 1.0, "the first query reached the upstream");
    assert!(
        hits_after >= hits_before + 3.0,
        "cache hits {hits_before} -> {hits_after}"
    );
}

#[test]
fn cluster_listener_answers_cluster_local_from_the_cluster_server() {
    let (lab, _supervisor, _notify) = ready_lab(&[]);
    let answer = query(CLUSTER, "kubernetes.default.svc.cluster.local", false).unwrap();
    assert_eq!(
        answer.a,
        vec!["10.96.0.1".parse::<std::net::Ipv4Addr>().unwrap()],
        "{answer:?}\n{}",
        lab.logs()
    );
    // The node listener forwards to the upstream, which does not serve cluster.local.
    let via_node = query(NODE, "kubernetes.default.svc.cluster.local", false).unwrap();
    assert_ne!(
        via_node.a, answer.a,
        "the node listener must not answer from the cluster server"
    );
}

#[test]
fn expired_name_is_served_stale_when_the_upstream_is_gone() {
    let (mut lab, _supervisor, _notify) = ready_lab(&[]);
    let fresh = query(NODE, "short.example.test", false).unwrap();
    assert_eq!(
        fresh.a,
        vec!["192.0.2.81".parse::<std::net::Ipv4Addr>().unwrap()],
        "{}",
        lab.logs()
    );
    let stale_before = metric_sum(&ok(metrics(METRICS)), "coredns_cache_served_stale_total");
    lab.upstream_server.take().expect("upstream runs").stop();
    // The record's TTL is 1 s, but the cache keeps answers at least its MINTTL (5 s by default).
    std::thread::sleep(Duration::from_millis(6500));
    let stale = query(NODE, "short.example.test", false).unwrap();
    assert_eq!(
        stale.a,
        fresh.a,
        "answer after the upstream stopped: {stale:?}\n{}",
        lab.logs()
    );
    let stale_after = metric_sum(&ok(metrics(METRICS)), "coredns_cache_served_stale_total");
    assert!(
        stale_after > stale_before,
        "served_stale {stale_before} -> {stale_after}"
    );
}

#[test]
fn metrics_answer_at_the_metrics_address_with_build_info() {
    let (_lab, _supervisor, _notify) = ready_lab(&[]);
    let text = ok(metrics(METRICS));
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(200)]
    );
    assert!(
        text.contains("coredns_build_info{"),
        "no coredns_build_info in the metrics"
    );
}

#[test]
fn supervisor_reports_ready_then_watchdog_ticks_at_a_fifth_of_watchdog_sec() {
    // WatchdogSec=5 → a check every second (generous for a TCG guest; ticks at WatchdogSec would
    // take 15 s for three).
    let (lab, _supervisor, notify) = ready_lab(&[("WATCHDOG_USEC", "5000000")]);
    let started = Instant::now();
    let mut ticks = 0;
    while ticks < 3 {
        match notify.recv(Duration::from_secs(10)) {
            Some(msg) if msg.contains("WATCHDOG=1") => ticks += 1,
            Some(_) => {}
            None => panic!("no WATCHDOG=1 within 10 s after {ticks} ticks\n{}", lab.logs()),
        }
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(10),
        "3 ticks took {took:?}, expected about 3 s (one per WatchdogSec/5)\n{}",
        lab.logs()
    );
}

/// The supervisor's child processes (CoreDNS), from every task's `children` file.
fn children_of(pid: u32) -> Vec<String> {
    let mut children = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(text.split_whitespace().map(str::to_owned));
    }
    children
}

#[test]
fn sigkill_of_coredns_is_answered_by_a_new_coredns_under_the_same_supervisor() {
    let (lab, mut supervisor, notify) = ready_lab(&[]);
    let pid = supervisor.child.id();
    ok(lab.node.enter());
    let mut took = Vec::new();
    for _ in 0..3 {
        let before = children_of(pid);
        let coredns = before
            .first()
            .expect("the supervisor has CoreDNS as its child")
            .clone();
        run(std::process::Command::new("kill").args(["-KILL", &coredns]));
        let killed = Instant::now();
        while std::path::Path::new(&format!("/proc/{coredns}/cmdline")).exists()
            && std::fs::read_to_string(format!("/proc/{coredns}/stat")).is_ok_and(|s| !s.contains(") Z "))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Over TCP: a listener that is gone refuses at once (a UDP query would wait out its
        // timeout), so the time is measured to within the 20 ms poll.
        loop {
            let answered = [NODE, CLUSTER].into_iter().all(|l| {
                query(l, "health-check.localdns.local", true).is_ok_and(|a| a.rcode == ResponseCode::NoError)
            });
            if answered {
                break;
            }
            if let Some(status) = supervisor.child.try_wait().unwrap() {
                panic!(
                    "the supervisor exited ({status}) after CoreDNS was killed\n{}",
                    lab.logs()
                );
            }
            assert!(
                killed.elapsed() < Duration::from_secs(60),
                "DNS not back 60 s after SIGKILL of CoreDNS\n{}",
                lab.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        took.push(killed.elapsed());
        notify
            .until("STATUS=CoreDNS healthy again", Duration::from_secs(60))
            .unwrap_or_else(|seen| panic!("no \"healthy again\" status: {seen:?}\n{}", lab.logs()));
        let after = children_of(pid);
        assert!(
            after.len() == 1 && after[0] != coredns,
            "expected one new CoreDNS under the supervisor, had {before:?}, now {after:?}"
        );
    }
    eprintln!("both listeners answered again {took:.2?} after each SIGKILL of CoreDNS (under TCG)");
}

#[test]
fn sigterm_stops_coredns_with_sigint_and_exits_cleanly() {
    let (lab, mut supervisor, _notify) = ready_lab(&[]);
    run(std::process::Command::new("kill").args(["-TERM", &supervisor.child.id().to_string()]));
    let status = ok(supervisor.wait_exit(Duration::from_secs(10))).expect("supervisor ends after SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", lab.logs());
    assert!(
        supervisor.log_text().contains("SIGINT: Shutting down"),
        "CoreDNS got SIGINT:\n{}",
        lab.logs()
    );
}

#[test]
fn supervisor_gives_up_after_the_tenth_failure_in_the_window_and_not_before() {
    // The rule alone: the supervisor must not kill the CoreDNS that fails its checks meanwhile.
    let (lab, mut supervisor, notify) = ready_lab(&[
        ("WATCHDOG_USEC", "1000000"),
        ("LOCALDNS_HUNG_AFTER_FAILED_CHECKS", "0"),
    ]);
    // Health checks made to fail for real: the ready port stops answering.
    ok(lab.node.run(&["nft", "add table inet h6_fail"]));
    ok(lab.node.run(&[
        "nft",
        "add chain inet h6_fail input { type filter hook input priority 0; policy accept; }",
    ]));
    ok(lab
        .node
        .run(&["nft", "add rule inet h6_fail input tcp dport 8181 drop"]));
    let messages = notify
        .until("WATCHDOG=trigger", Duration::from_secs(30))
        .unwrap_or_else(|seen| panic!("no WATCHDOG=trigger: {seen:?}\n{}", lab.logs()));
    assert!(
        messages.last().unwrap().contains("10 failed health checks"),
        "{messages:?}"
    );
    let status = ok(supervisor.wait_exit(Duration::from_secs(30))).expect("supervisor exits after giving up");
    assert_eq!(status.code(), Some(4), "{}", lab.logs());
    let log = supervisor.log_text();
    // Failures 1..9 were tolerated, each logged, and the 10th gave up.
    for n in 1..=9 {
        assert!(
            log.contains(&format!("failures_in_window={n} ")),
            "failure {n} not tolerated:\n{log}"
        );
    }
    assert!(
        !log.contains("failures_in_window=10 "),
        "the 10th failure must give up, not be tolerated:\n{log}"
    );
}
