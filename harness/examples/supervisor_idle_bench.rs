//! `cargo run -p harness --example supervisor_idle_bench [-- SECONDS SOCKETS]`: what the LocalDNS
//! supervisor costs on an idle node, and what its hung-CoreDNS rule's look at `/proc/net` adds.
//! The real supervisor runs the real CoreDNS in a network namespace on this host (the live-test
//! lab of `harness/tests/localdns_live_support/`, listeners on `lo`); nothing asks it anything but
//! its own health checks. Four rounds of SECONDS each: the queue rule on (the default, a look every
//! 200 ms) and off (`LOCALDNS_STUCK_AFTER_MS=0`), each with the namespace's few sockets and with
//! SOCKETS more TCP sockets open in it (established loopback connections, as the kubelet,
//! containerd and host-network pods hold on a node that shares the host network). Each round prints
//! the supervisor's own CPU time over the round (utime+stime, millicores); then the time one look
//! takes in this process (`agent::sockets::waiting_on`, both listeners, TCP and UDP) with either
//! socket count. Needs root, the CoreDNS artifact (`harness images build`) and the supervisor built
//! into the same target directory and profile (`cargo build -p agent --bins`). Results:
//! `docs/perf.md`.

#[path = "../tests/localdns_live_support/mod.rs"]
mod support;

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use agent::supervisor::stuck::cpu_ticks_in_stat;
use anyhow::{Context, Result, anyhow, ensure};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::*;

/// Looks timed for the per-look figure.
const LOOKS: u32 = 500;
/// The supervisor's look interval with the default rule (`Settings::stuck_poll`).
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// `count` sockets in the calling thread's namespace: a loopback listener and established
/// connections to it, both ends kept (two sockets a connection).
fn open_sockets(count: usize) -> Result<Vec<TcpStream>> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding a loopback listener")?;
    let at = listener.local_addr()?;
    let mut held = Vec::with_capacity(count);
    while held.len() + 1 < count {
        held.push(
            TcpStream::connect(at).with_context(|| format!("connecting to {at} ({} open)", held.len()))?,
        );
        held.push(listener.accept().context("accepting")?.0);
    }
    Ok(held)
}

/// utime+stime of `pid` in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    cpu_ticks_in_stat(&stat).ok_or_else(|| anyhow!("{path}: no CPU times in {stat:?}"))
}

/// The supervisor's CPU over `seconds` idle, in clock ticks, with `rule_on` or the queue rule off.
fn idle_round(lab: &Lab, notify: &NotifySocket, rule_on: bool, seconds: u64) -> Result<u64> {
    while notify.recv(Duration::from_millis(1)).is_some() {}
    let extra: &[(&str, &str)] = if rule_on {
        &[]
    } else {
        &[("LOCALDNS_STUCK_AFTER_MS", "0")]
    };
    let mut supervisor = lab.start_supervisor(&lab.supervisor_env(extra), Some(&notify.path));
    notify
        .until("READY=1", Duration::from_secs(60))
        .map_err(|seen| anyhow!("no READY=1 within 60 s (it sent {seen:?})\n{}", lab.logs()))?;
    let pid = supervisor.child.id();
    // The start's own work (the wait for health) is not idle time.
    std::thread::sleep(Duration::from_secs(2));
    let before = cpu_ticks(pid)?;
    std::thread::sleep(Duration::from_secs(seconds));
    let ticks = cpu_ticks(pid)? - before;
    kill(Pid::from_raw(i32::try_from(pid)?), Signal::SIGTERM).context("SIGTERM to the supervisor")?;
    ensure!(
        supervisor.wait_exit(Duration::from_secs(30)).is_some(),
        "the supervisor did not exit within 30 s of SIGTERM\n{}",
        lab.logs()
    );
    Ok(ticks)
}

/// The mean time of one look at both listeners' queues, read from the calling thread's namespace.
fn one_look() -> Result<Duration> {
    let t = Instant::now();
    for _ in 0..LOOKS {
        agent::sockets::waiting_on(&[NODE, CLUSTER], 53).map_err(|e| anyhow!("reading /proc/net: {e}"))?;
    }
    Ok(t.elapsed() / LOOKS)
}

/// Lines of TCP and UDP sockets the calling thread's namespace lists in `/proc/net`.
fn listed_sockets() -> Result<usize> {
    let mut lines = 0;
    for proto in ["tcp", "udp"] {
        let path = format!("/proc/thread-self/net/{proto}");
        lines += std::fs::read_to_string(&path)
            .with_context(|| format!("reading {path}"))?
            .lines()
            .count()
            - 1;
    }
    Ok(lines)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let seconds: u64 = parse_arg(&args, 1, "SECONDS", 30)?;
    let sockets: usize = parse_arg(&args, 2, "SOCKETS", 2000)?;
    let clk_tck = clock_ticks()?;
    let bench = BenchLab::build()?;
    let lab = &bench.lab;
    let notify = NotifySocket::bind(lab.dir.path());

    println!("the supervisor idle (its health checks only), {seconds} s a round; its CPU in millicores (m)");
    let mut looks = Vec::new();
    for extra in [0, sockets] {
        let held = open_sockets(extra)?;
        let listed = listed_sockets()?;
        for rule_on in [true, false] {
            let ticks = idle_round(lab, &notify, rule_on, seconds)?;
            println!(
                "queue rule {:<3}  {listed:>5} sockets listed  supervisor CPU {:>6.2} m  ({ticks} ticks in {seconds} s)",
                if rule_on { "on" } else { "off" },
                millicores(ticks, clk_tck, seconds as f64)
            );
        }
        looks.push((listed, one_look()?));
        drop(held);
    }
    for (listed, look) in looks {
        let share = look.as_secs_f64() * 1000.0 / LOOK_EVERY.as_secs_f64();
        println!(
            "one look at both listeners' queues with {listed:>5} sockets listed: {:>7.1} µs (every {LOOK_EVERY:?}: {share:.2} m)",
            look.as_secs_f64() * 1e6
        );
    }
    Ok(())
}
