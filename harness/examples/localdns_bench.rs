//! `cargo run --release -p harness --example localdns_bench [-- SECONDS THREADS]`: cached-query
//! throughput and latency through the node listener of a live LocalDNS (real CoreDNS under the
//! supervisor, network namespaces on this host), with our NOTRACK table and then the same CoreDNS
//! without it, plus conntrack's entry count during each load. Needs root, the CoreDNS artifact
//! (`harness images build`) and `cargo build -p agent --bins`. Results: `docs/perf.md`.

#[path = "../tests/localdns_live_support/mod.rs"]
mod support;

use std::net::{Ipv4Addr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use support::*;

struct Run {
    queries: u64,
    seconds: f64,
    p50_us: u64,
    p99_us: u64,
    max_conntrack: u64,
}

/// Closed-loop load: `threads` clients, each one query in flight, for `duration`.
fn load(lab: &Lab, duration: Duration, threads: usize) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let max_conntrack = Arc::new(AtomicU64::new(0));
    let node = lab.node.name.clone();
    let sampler = {
        let (stop, max) = (stop.clone(), max_conntrack.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let out = std::process::Command::new("ip")
                    .args(["netns", "exec", &node, "conntrack", "-C"])
                    .output();
                if let Ok(out) = out {
                    let n: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
                    max.fetch_max(n, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let stop = stop.clone();
            let ns = lab.node.name.clone();
            std::thread::spawn(move || {
                let file = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
                nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                let mut msg = Message::query();
                msg.metadata.recursion_desired = true;
                msg.add_query(Query::query(
                    Name::from_ascii("www.example.test.").unwrap(),
                    RecordType::A,
                ));
                let mut latencies = Vec::new();
                let mut buf = [0u8; 1500];
                while !stop.load(Ordering::Relaxed) {
                    // A new socket (source port) per query, as stub resolvers do: one flow per query.
                    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
                    socket.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                    msg.metadata.id = msg.metadata.id.wrapping_add(1);
                    let bytes = msg.to_vec().unwrap();
                    let t = Instant::now();
                    socket.send_to(&bytes, (NODE, 53)).unwrap();
                    if socket.recv(&mut buf).is_ok() {
                        latencies.push(t.elapsed().as_micros() as u64);
                    }
                }
                latencies
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let mut all: Vec<u64> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let seconds = started.elapsed().as_secs_f64();
    sampler.join().unwrap();
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    Run {
        queries: all.len() as u64,
        seconds,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        max_conntrack: max_conntrack.load(Ordering::Relaxed),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: u64 = args.get(1).map(|s| s.parse().expect("SECONDS")).unwrap_or(10);
    let threads: usize = args.get(2).map(|s| s.parse().expect("THREADS")).unwrap_or(4);
    // This host's kernel may lack dummy links: the listeners go on `lo` (the tests use the link).
    let cache = harness::cache::Cache::open().expect("lab cache");
    let coredns = harness::images::coredns::require(&cache)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .binary;
    let lab = Lab::build(true, Listeners::Loopback, coredns);
    // Conntrack active, as on any node with a stateful firewall.
    lab.node.run(&["nft", "add table inet bench_stateful"]);
    lab.node.run(&[
        "nft",
        "add chain inet bench_stateful input { type filter hook input priority 0; policy accept; }",
    ]);
    lab.node.run(&[
        "nft",
        "add rule inet bench_stateful input ct state established,related accept",
    ]);
    let notify = NotifySocket::bind(lab.dir.path());
    let _supervisor = lab.start_supervisor(&lab.supervisor_env(&[]), Some(&notify.path));
    notify
        .until("READY=1", Duration::from_secs(60))
        .expect("supervisor READY");
    lab.node.enter();
    query(NODE, "www.example.test", false).expect("warm the cache");

    // Alternating rounds, so that drift of a shared machine hits both sides alike.
    let script = lab.dir.path().join("localdns.nft");
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..4 {
        let with_rules = round % 2 == 0;
        if with_rules {
            lab.node.run(&["nft", "-f", script.to_str().unwrap()]);
        } else {
            lab.node.run(&["nft", "delete table ip unbounded_localdns"]);
        }
        lab.node.run(&["conntrack", "-F"]);
        let run = load(&lab, Duration::from_secs(seconds), threads);
        let label = if with_rules {
            "with NOTRACK rules"
        } else {
            "without our rules"
        };
        println!(
            "{label:<20} {:>8.0} q/s  p50 {:>5} µs  p99 {:>6} µs  max conntrack entries {:>6}  ({} queries in {:.1} s, {threads} clients)",
            run.queries as f64 / run.seconds,
            run.p50_us,
            run.p99_us,
            run.max_conntrack,
            run.queries,
            run.seconds
        );
        if with_rules {
            with.push(run);
        } else {
            without.push(run);
        }
    }
    let qps = |runs: &[Run]| {
        runs.iter().map(|r| r.queries as f64).sum::<f64>() / runs.iter().map(|r| r.seconds).sum::<f64>()
    };
    println!(
        "throughput ratio (with / without our rules): {:.3}",
        qps(&with) / qps(&without)
    );
}
