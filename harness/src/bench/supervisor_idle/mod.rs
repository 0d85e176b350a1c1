//! `harness bench supervisor-idle`: what the LocalDNS supervisor costs on an idle node, and what
//! its hung-CoreDNS rule's look at the listeners' queues adds. The real supervisor runs the real
//! CoreDNS in a network namespace on this host (a live LocalDNS, [`crate::localdns_live`],
//! listeners on `lo`); nothing asks it anything but its own health checks. Four rounds: the queue
//! rule on (the default, a look every 200 ms) and off (`LOCALDNS_STUCK_AFTER_MS=0`), each with the
//! namespace's few sockets and with `sockets` more TCP sockets open in it (established loopback
//! connections, as the kubelet, containerd and host-network pods hold on a node that shares the
//! host network). Each round gives the supervisor's own CPU time over the round (utime+stime,
//! millicores); then the time one look takes in this process (`agent::sockets::waiting_on`, both
//! listeners, TCP and UDP) with either socket count: [`SupervisorIdleReport`] ([`report`]).

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::error::{BenchError, io_err};
use super::host::{self, BenchLab, IP, NFT};
use super::procfs::{cpu_ticks, millicores};
use crate::localdns_live::{CLUSTER, Lab, NODE, NotifySocket};

pub mod report;

pub use report::{IdleRound, Look, SupervisorIdleReport, header};

/// Looks timed for the per-look figure.
pub const LOOKS: u32 = 500;
/// The supervisor's look interval with the default rule (`Settings::stuck_poll`).
pub const LOOK_EVERY: Duration = Duration::from_millis(200);
/// Idle time after READY=1 before a round starts: the start's own work (the wait for health) is
/// not idle time.
const SETTLE: Duration = Duration::from_secs(2);

/// What the benchmark is asked for.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Seconds per round.
    pub seconds: u64,
    /// TCP sockets opened in the node namespace for the rounds with many sockets.
    pub sockets: usize,
}

/// About `count` sockets in the calling thread's namespace: established connections to a loopback
/// listener, both ends kept (two sockets a connection); the listener itself is closed.
fn open_sockets(count: usize) -> Result<Vec<TcpStream>, BenchError> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io_err("binding a listener on", "127.0.0.1"))?;
    let at = listener
        .local_addr()
        .map_err(io_err("the address of a listener on", "127.0.0.1"))?;
    let mut held = Vec::with_capacity(count);
    while held.len() + 1 < count {
        held.push(TcpStream::connect(at).map_err(io_err("connecting to", at.to_string()))?);
        held.push(
            listener
                .accept()
                .map_err(io_err("accepting on", at.to_string()))?
                .0,
        );
    }
    Ok(held)
}

/// The supervisor's CPU over `seconds` idle, in clock ticks, with the queue rule on or off.
fn idle_round(lab: &Lab, notify: &NotifySocket, rule_on: bool, seconds: u64) -> Result<u64, BenchError> {
    notify.drain();
    let extra: &[(&str, &str)] = if rule_on {
        &[]
    } else {
        &[("LOCALDNS_STUCK_AFTER_MS", "0")]
    };
    let supervisor = lab.start_supervisor(&lab.supervisor_env(extra)?, Some(&notify.path))?;
    notify
        .until("READY=1", Duration::from_secs(60))
        .map_err(|seen| BenchError::NotReady {
            seen,
            logs: lab.logs(),
        })?;
    let pid = supervisor.pid();
    std::thread::sleep(SETTLE);
    let before = cpu_ticks(pid)?;
    std::thread::sleep(Duration::from_secs(seconds));
    let ticks = cpu_ticks(pid)?.saturating_sub(before);
    super::localdns::serving::terminate(lab, supervisor)?;
    Ok(ticks)
}

/// The mean time of one look at both listeners' queues, from the calling thread's namespace.
fn one_look() -> Result<Duration, BenchError> {
    let t = Instant::now();
    for _ in 0..LOOKS {
        agent::sockets::waiting_on(&[NODE, CLUSTER], 53).map_err(BenchError::Sockets)?;
    }
    Ok(t.elapsed() / LOOKS)
}

/// Lines of TCP and UDP sockets the calling thread's namespace lists in `/proc/net`.
fn listed_sockets() -> Result<usize, BenchError> {
    let mut lines = 0;
    for proto in ["tcp", "udp"] {
        let path = format!("/proc/thread-self/net/{proto}");
        let text = std::fs::read_to_string(&path).map_err(io_err("reading", &path))?;
        // The first line is the header.
        lines += text.lines().count().saturating_sub(1);
    }
    Ok(lines)
}

/// Checks the prerequisites, runs the four rounds (each handed to `on_round` as it ends) and the
/// looks, and reports.
pub fn run(
    params: Params,
    on_round: impl FnMut(&IdleRound) + Send,
) -> Result<SupervisorIdleReport, BenchError> {
    let found = host::require("supervisor-idle", &[IP, NFT])?;
    let clk_tck = super::procfs::clock_ticks()?;
    host::on_own_thread(|| {
        let bench = BenchLab::build(&found)?;
        measure(&bench.lab, params, clk_tck, on_round)
    })
}

fn measure(
    lab: &Lab,
    params: Params,
    clk_tck: u64,
    mut on_round: impl FnMut(&IdleRound),
) -> Result<SupervisorIdleReport, BenchError> {
    let notify = NotifySocket::bind(lab.dir.path())?;
    let mut rounds = Vec::new();
    let mut looks = Vec::new();
    for extra in [0, params.sockets] {
        let held = open_sockets(extra)?;
        let listed = listed_sockets()?;
        for rule_on in [true, false] {
            let ticks = idle_round(lab, &notify, rule_on, params.seconds)?;
            let round = IdleRound {
                queue_rule_on: rule_on,
                sockets_listed: listed,
                cpu_ticks: ticks,
                cpu_millicores: millicores(ticks, clk_tck, params.seconds as f64),
            };
            on_round(&round);
            rounds.push(round);
        }
        let look = one_look()?;
        looks.push(Look {
            sockets_listed: listed,
            one_look_us: look.as_secs_f64() * 1e6,
            millicores_at_look_interval: look.as_secs_f64() * 1000.0 / LOOK_EVERY.as_secs_f64(),
        });
        drop(held);
    }
    Ok(SupervisorIdleReport {
        seconds_per_round: params.seconds,
        extra_sockets: params.sockets,
        clock_ticks_per_second: clk_tck,
        look_every_ms: LOOK_EVERY.as_millis() as u64,
        rounds,
        looks,
    })
}
