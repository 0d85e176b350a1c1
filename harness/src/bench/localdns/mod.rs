//! `harness bench localdns`: cached-query throughput and latency through the node listener of a
//! live LocalDNS (network namespaces on this host, [`crate::localdns_live`]) in three setups
//! ([`Setup`]), taken in turn twice so that drift of a shared machine hits every setup alike: the
//! real CoreDNS under the supervisor with our NOTRACK table, the same without the table, and the
//! same CoreDNS binary with no agent at all (started directly with a hand-written Corefile,
//! [`serving::bare_corefile`], no table of ours). Conntrack is active in the node namespace, as on
//! any node with a stateful firewall. During each round it samples conntrack's entry count and
//! the serving CoreDNS's peak RSS and CPU, reported against the agent's default LocalDNS limits;
//! then each setup over both rounds and the throughput ratios (ours with rules / without, with
//! rules / bare, without rules / bare): [`LocalDnsReport`].
//!
//! * [`serving`]: starting and stopping what serves the node listener;
//! * [`load`]: a round's clients and sampler;
//! * [`report`]: the figures and their text.

pub mod load;
pub mod report;
pub mod serving;

use std::time::Duration;

use agent::exec;

pub use report::{LocalDnsReport, Round, Setup};
use serving::Serving;

use super::error::BenchError;
use super::host::{self, BenchLab, CONNTRACK, IP, NFT, SS};
use crate::localdns_live::{Lab, NODE, NotifySocket};

/// The cached name every client asks for (A record, TTL 300 in the upstream zone).
pub const QUERY_NAME: &str = "www.example.test.";

/// Rounds per setup.
pub const ROUNDS: usize = 2;

/// What the benchmark is asked for.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Seconds of load per round.
    pub seconds: u64,
    /// Clients, each with one query in flight.
    pub threads: usize,
}

fn nft(lab: &Lab, args: &[&str]) -> Result<(), BenchError> {
    exec::run(lab.node.cmd("nft").args(args))?;
    Ok(())
}

/// Checks the prerequisites, runs the [`ROUNDS`] × 3 rounds (each handed to `on_round` as it
/// ends) and reports.
pub fn run(params: Params, on_round: impl FnMut(&Round) + Send) -> Result<LocalDnsReport, BenchError> {
    let found = host::require("localdns", &[IP, NFT, CONNTRACK, SS])?;
    let clk_tck = super::procfs::clock_ticks()?;
    host::on_own_thread(|| {
        let bench = BenchLab::build(&found)?;
        let rounds = rounds(&bench.lab, params, clk_tck, on_round)?;
        Ok(LocalDnsReport::new(
            params.seconds,
            params.threads,
            rounds,
            clk_tck,
        ))
    })
}

fn rounds(
    lab: &Lab,
    params: Params,
    clk_tck: u64,
    mut on_round: impl FnMut(&Round),
) -> Result<Vec<Round>, BenchError> {
    // Conntrack active, as on any node with a stateful firewall.
    nft(lab, &["add table inet bench_stateful"])?;
    nft(
        lab,
        &["add chain inet bench_stateful input { type filter hook input priority 0; policy accept; }"],
    )?;
    nft(
        lab,
        &["add rule inet bench_stateful input ct state established,related accept"],
    )?;
    let notify = NotifySocket::bind(lab.dir.path())?;
    // Lab::build loaded our table; the supervisor serves first.
    let script = lab.dir.path().join("localdns.nft").display().to_string();
    let mut serving = serving::start_ours(lab, &notify)?;
    let mut rounds = Vec::new();
    // Alternating rounds, so that drift of a shared machine hits every setup alike.
    for _ in 0..ROUNDS {
        for setup in Setup::ALL {
            serving = match (setup, serving) {
                (Setup::OursWithRules, ours @ Serving::Ours(_)) => {
                    nft(lab, &["-f", &script])?;
                    ours
                }
                (Setup::OursWithRules, Serving::Bare(bare)) => {
                    serving::stop_bare(lab, bare)?;
                    nft(lab, &["-f", &script])?;
                    serving::start_ours(lab, &notify)?
                }
                (Setup::OursWithoutRules, ours @ Serving::Ours(_)) => {
                    nft(lab, &["delete table ip unbounded_localdns"])?;
                    ours
                }
                (Setup::Bare, Serving::Ours(supervisor)) => {
                    serving::stop_ours(lab, supervisor)?;
                    serving::start_bare(lab)?
                }
                (setup, _) => unreachable!("the rounds go from ours to bare and back, not to {setup:?}"),
            };
            let pid = serving.coredns_pid(lab)?;
            exec::run(lab.node.cmd("conntrack").arg("-F"))?;
            let raw =
                load::load(lab, pid, Duration::from_secs(params.seconds), params.threads).map_err(|e| {
                    BenchError::Round {
                        setup: setup.label(),
                        source: Box::new(e),
                    }
                })?;
            let held = serving::listener_pids(lab)?;
            if held != [pid] {
                return Err(BenchError::Listener(format!(
                    "{NODE}:53 changed hands during the round (CoreDNS {pid} restarted?): now {held:?}\n{}",
                    lab.logs()
                )));
            }
            let round = Round::new(setup, raw, clk_tck);
            on_round(&round);
            rounds.push(round);
        }
    }
    // The last round's CoreDNS is killed on drop (Proc), before the namespaces go.
    drop(serving);
    Ok(rounds)
}
