//! `harness bench vm`, `node`, `cluster`, `suite`, `localdns` and `supervisor-idle`; `vm` gives
//! the lab VM's figures on this machine — QEMU start to a ready guest, cold and resumed from the
//! saved state; reboot time; guest commands per second over the guest agent; QEMU's memory (RSS)
//! per VM. VMs on user networking, no lab needed.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::cache::Cache;
use crate::images::host;
use crate::vm::{Accel, BootImage, BootMode, Vm, VmSpec};
use anyhow::Context;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Time VM starts (cold and resumed), reboots and guest commands; measure QEMU's RSS.
    ///
    /// Builds the saved state first if it is missing (and says how long that took).
    /// Example: `harness bench vm --runs 3`.
    Vm {
        /// VMs started per mode (one at a time).
        #[arg(long, default_value_t = 2)]
        runs: u32,
        /// How long to send `true` over the guest agent, in seconds.
        #[arg(long, default_value_t = 10)]
        command_secs: u64,
        /// Skip the cold boots (they take a minute or more each under TCG).
        #[arg(long)]
        no_cold: bool,
    },
    /// Join a node in a lab with its control plane: time from `start` to LocalDNS ready and to
    /// Node Ready, memory at steady state (docs/perf.md). Example: `harness bench node`.
    Node(super::bench_node::Args),
    /// Make the lab's Kind cluster cold (its node image imported first) and warm, side by side:
    /// time to a cluster that answers, teardown, the cold/warm ratio (docs/perf.md).
    /// Example: `harness bench cluster --warm 2`.
    Cluster(super::bench_cluster::Args),
    /// Where a test run's time went, from nextest's JUnit report: the `vm` group's lanes busy
    /// and idle, each VM test longest first (docs/perf.md). Example: `harness bench suite`
    /// after `scripts/test.sh`.
    Suite(super::bench_suite::Args),
    /// LocalDNS's cached-query throughput with and without NOTRACK rules, and bare CoreDNS's.
    ///
    /// In network namespaces on this host: ours (the supervisor's CoreDNS) with our NOTRACK
    /// rules, ours without, and bare CoreDNS serve the node listener, each twice; conntrack's
    /// entries, CoreDNS's RSS and CPU, and the throughput ratios (docs/perf.md). Needs root, nft,
    /// conntrack, ss, the CoreDNS artifact and the supervisor built beside harness.
    /// Example: `harness bench localdns --seconds 8 --threads 4`.
    #[command(name = "localdns")]
    LocalDns(super::bench_localdns::Args),
    /// The LocalDNS supervisor's CPU when idle, its hung-CoreDNS queue rule on and off.
    ///
    /// Four rounds (the rule on and off, with few and with `--sockets` more sockets), then the
    /// time of one look at the listeners' queues (docs/perf.md). Needs root, nft, the CoreDNS
    /// artifact and the supervisor built beside harness.
    /// Example: `harness bench supervisor-idle --seconds 30 --sockets 2000`.
    SupervisorIdle(super::bench_supervisor_idle::Args),
}

pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Vm {
            runs,
            command_secs,
            no_cold,
        } => bench_vm(runs.max(1), Duration::from_secs(command_secs), !no_cold),
        Command::Node(args) => super::bench_node::run(args),
        Command::Cluster(args) => super::bench_cluster::run(args),
        Command::Suite(args) => super::bench_suite::run(args),
        Command::LocalDns(args) => super::bench_localdns::run(args),
        Command::SupervisorIdle(args) => super::bench_supervisor_idle::run(args),
    }
}

/// What one VM start gave.
struct Start {
    ready: Duration,
    rss_mib: u64,
}

fn bench_vm(runs: u32, command_time: Duration, cold: bool) -> anyhow::Result<ExitCode> {
    let cache = Cache::open()?;
    let image = BootImage::from(&host::require(&cache)?);
    let accel = Accel::from_env()?;
    let spec = |name: &str, mode| {
        let mut spec = VmSpec::new("bench", name, image.clone());
        spec.boot_mode = Some(mode);
        spec
    };
    let mut lines = vec![format!("accelerator {accel}, {} cores", num_cpus())];

    let started = Instant::now();
    let saved = crate::vm::Vm::ensure_saved_state(&cache, &spec("probe", BootMode::Resume), accel)?;
    let found = started.elapsed();
    lines.push(format!(
        "saved state {}: {} MB stream, taken after a {:.1}s boot, saved in {:.1}s (found/built now in {:.1}s)",
        saved.key,
        saved.info.stream_bytes >> 20,
        saved.info.boot_secs,
        saved.info.save_secs,
        found.as_secs_f64()
    ));

    let mut resumed = Vec::new();
    let mut reboots = Vec::new();
    let mut cold_reboots = Vec::new();
    let mut rates = Vec::new();
    for i in 0..runs {
        let mut vm = Vm::boot(spec(&format!("resumed-{i}"), BootMode::Resume))?;
        anyhow::ensure!(
            vm.boot_mode() == BootMode::Resume,
            "VM {} was not resumed",
            vm.name()
        );
        resumed.push(Start {
            ready: vm.boot_time(),
            rss_mib: rss_mib(vm.pid())?,
        });
        if i == 0 {
            rates.push(commands_per_second(&vm, command_time)?);
            let t = Instant::now();
            vm.reboot()?;
            reboots.push(t.elapsed());
            rates.push(commands_per_second(&vm, command_time)?);
        }
        vm.shutdown()?;
    }
    let mut colds = Vec::new();
    if cold {
        for i in 0..runs {
            let mut vm = Vm::boot(spec(&format!("cold-{i}"), BootMode::Cold))?;
            colds.push(Start {
                ready: vm.boot_time(),
                rss_mib: rss_mib(vm.pid())?,
            });
            if i == 0 {
                let t = Instant::now();
                vm.reboot()?;
                cold_reboots.push(t.elapsed());
            }
            vm.shutdown()?;
        }
    }

    let secs = |d: &[Duration]| summary(&d.iter().map(|d| d.as_secs_f64()).collect::<Vec<_>>(), "s");
    let ready = |s: &[Start]| s.iter().map(|s| s.ready).collect::<Vec<_>>();
    let rss = |s: &[Start]| summary(&s.iter().map(|s| s.rss_mib as f64).collect::<Vec<_>>(), " MiB");
    lines.push(format!(
        "QEMU start to ready, resumed:  {}",
        secs(&ready(&resumed))
    ));
    if cold {
        lines.push(format!("QEMU start to ready, cold:     {}", secs(&ready(&colds))));
    }
    lines.push(format!("reboot of a resumed VM:        {}", secs(&reboots)));
    if cold {
        lines.push(format!("reboot of a cold-booted VM:    {}", secs(&cold_reboots)));
    }
    lines.push(format!(
        "guest commands (`true`) over the agent: {} just after the resume, {} after its reboot",
        summary(&rates[..1], "/s"),
        summary(&rates[1..], "/s")
    ));
    lines.push(format!("QEMU RSS just after resume:    {}", rss(&resumed)));
    if cold {
        lines.push(format!("QEMU RSS just after cold boot: {}", rss(&colds)));
    }
    println!("harness bench vm ({runs} run(s) per mode; min / median / max)");
    for line in lines {
        println!("  {line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `true` in the guest for `time`; commands per second.
fn commands_per_second(vm: &Vm, time: Duration) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut n = 0u32;
    while started.elapsed() < time {
        vm.run("true")?;
        n += 1;
    }
    Ok(f64::from(n) / started.elapsed().as_secs_f64())
}

/// `VmRSS` of process `pid`, in MiB.
fn rss_mib(pid: i32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .with_context(|| format!("no VmRSS in {path}"))?;
    Ok(kib / 1024)
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// `min / median / max<unit>` (or the one value).
fn summary(values: &[f64], unit: &str) -> String {
    if values.is_empty() {
        return "(not measured)".into();
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (min, max, median) = (sorted[0], sorted[sorted.len() - 1], sorted[sorted.len() / 2]);
    if sorted.len() == 1 {
        format!("{min:.1}{unit}")
    } else {
        format!("{min:.1} / {median:.1} / {max:.1}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_gives_min_median_and_max() {
        assert_eq!(summary(&[3.0, 1.0, 2.0], "s"), "1.0 / 2.0 / 3.0s");
        assert_eq!(summary(&[5.3], " MiB"), "5.3 MiB");
        assert_eq!(summary(&[], "s"), "(not measured)");
    }

    #[test]
    fn rss_of_this_process_is_read() {
        assert!(rss_mib(std::process::id() as i32).unwrap() > 0);
    }
}
