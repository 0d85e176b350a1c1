//! A round's load and what is sampled meanwhile: closed-loop UDP clients on the node listener,
//! conntrack's entry count and the serving CoreDNS's RSS and CPU.

use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent::exec;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};

use super::QUERY_NAME;
use super::report::RawRound;
use crate::bench::error::BenchError;
use crate::bench::procfs::{cpu_ticks, rss_kib};
use crate::localdns_live::{Lab, NODE, Netns};

/// How often conntrack and the serving CoreDNS are sampled during a round.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// What the sampler thread saw.
struct Samples {
    max_conntrack: u64,
    peak_rss_kib: u64,
}

/// Every [`SAMPLE_EVERY`] until `stop`: conntrack's entry count in the node namespace and the
/// VmRSS of `pid`.
fn sample(node: &Netns, pid: u32, stop: &AtomicBool) -> Result<Samples, BenchError> {
    let mut samples = Samples {
        max_conntrack: 0,
        peak_rss_kib: rss_kib(pid)?,
    };
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        samples.peak_rss_kib = samples.peak_rss_kib.max(rss_kib(pid)?);
        let out = exec::run_stdout(node.cmd("conntrack").arg("-C"))?;
        let count: u64 = out.trim().parse().map_err(|_| BenchError::Unexpected {
            source_of: "`conntrack -C`".into(),
            why: format!("printed {out:?}, not a number"),
        })?;
        samples.max_conntrack = samples.max_conntrack.max(count);
        next += SAMPLE_EVERY;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    Ok(samples)
}

/// One client: a query in flight at a time until `stop`; the latencies of the answered ones, µs.
fn client(node: &Netns, stop: &AtomicBool) -> Result<Vec<u64>, BenchError> {
    node.enter()?;
    let mut msg = Message::query();
    msg.metadata.recursion_desired = true;
    let name = Name::from_ascii(QUERY_NAME).expect("the benchmark's query name is valid");
    msg.add_query(Query::query(name, RecordType::A));
    let mut latencies = Vec::new();
    let mut buf = [0u8; 1500];
    let io = |what: &'static str| {
        move |source| BenchError::Io {
            what,
            path: format!("{NODE}:53").into(),
            source,
        }
    };
    while !stop.load(Ordering::Relaxed) {
        // A new socket (source port) per query, as stub resolvers do: one flow per query.
        let socket =
            UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(io("binding a client socket for"))?;
        socket
            .set_read_timeout(Some(Duration::from_secs(1)))
            .map_err(io("setting a timeout for"))?;
        msg.metadata.id = msg.metadata.id.wrapping_add(1);
        let bytes = msg.to_vec().expect("the benchmark's query encodes");
        let t = Instant::now();
        socket
            .send_to(&bytes, (NODE, 53))
            .map_err(io("sending a query to"))?;
        if socket.recv(&mut buf).is_ok() {
            latencies.push(t.elapsed().as_micros() as u64);
        }
    }
    Ok(latencies)
}

/// Closed-loop load: `threads` clients, each one query in flight, for `duration`, while the
/// serving CoreDNS `pid` and conntrack are sampled.
pub fn load(lab: &Lab, pid: u32, duration: Duration, threads: usize) -> Result<RawRound, BenchError> {
    let stop = AtomicBool::new(false);
    let node = &lab.node;
    std::thread::scope(|s| {
        let cpu_before = cpu_ticks(pid)?;
        let started = Instant::now();
        let sampler = s.spawn(|| sample(node, pid, &stop));
        let workers: Vec<_> = (0..threads).map(|_| s.spawn(|| client(node, &stop))).collect();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for worker in workers {
            all.extend(worker.join().map_err(|_| BenchError::Panicked("client"))??);
        }
        let cpu_after = cpu_ticks(pid)?;
        let seconds = started.elapsed().as_secs_f64();
        let samples = sampler.join().map_err(|_| BenchError::Panicked("sampler"))??;
        all.sort_unstable();
        let pct = |p: f64| {
            all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        Ok(RawRound {
            queries: all.len() as u64,
            seconds,
            p50_us: pct(0.50),
            p99_us: pct(0.99),
            max_conntrack: samples.max_conntrack,
            peak_rss_kib: samples.peak_rss_kib,
            cpu_ticks: cpu_after.saturating_sub(cpu_before),
        })
    })
}
