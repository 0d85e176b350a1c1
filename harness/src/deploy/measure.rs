//! Figures of a joined node (for `harness bench node`): time from `start` to LocalDNS ready
//! and to Node Ready, and memory at steady state (guest, machine, LocalDNS, QEMU's RSS).

use std::time::Duration;

use super::join::Joined;
use crate::vm::{Vm, VmError};

/// The figures of one joined node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFigures {
    /// `start` from invocation to exit (kubelet active).
    pub start: Duration,
    /// From `start` to `localdns.service` active in the machine (the supervisor reports ready
    /// once both listeners answer `/ready`); `None` with LocalDNS off.
    pub localdns_ready: Option<Duration>,
    /// From `start` to the Node's Ready condition.
    pub node_ready: Duration,
    /// Guest memory in use (`MemTotal - MemAvailable`), bytes.
    pub guest_used: u64,
    pub guest_total: u64,
    /// The machine's cgroup (`systemd-nspawn@<m>.service` `MemoryCurrent`), bytes.
    pub machine: Option<u64>,
    /// `localdns.service` in the machine (`MemoryCurrent`), bytes.
    pub localdns: Option<u64>,
    /// QEMU's resident set on the host, bytes.
    pub qemu_rss: Option<u64>,
}

/// `MemTotal` and `MemAvailable` of a `/proc/meminfo`, bytes.
pub fn meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map(|kib| kib * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

/// `VmRSS` of a `/proc/<pid>/status`, bytes.
pub fn vm_rss(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kib| kib * 1024)
}

/// A `MemoryCurrent` value: bytes, or `None` for `[not set]` / empty.
pub fn memory_current(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Time from `start` (the guest's uptime then, seconds) to a monotonic timestamp (µs; 0 means
/// "never").
pub fn since_start(start_uptime: f64, monotonic_usec: u64) -> Option<Duration> {
    if monotonic_usec == 0 {
        return None;
    }
    Duration::try_from_secs_f64(monotonic_usec as f64 / 1e6 - start_uptime).ok()
}

/// Measures `joined` on `vm` in machine `machine` (call after the node settled).
pub fn measure(vm: &Vm, joined: &Joined, machine: &str) -> Result<NodeFigures, VmError> {
    let show = |args: &str| -> Result<String, VmError> {
        Ok(vm.run_unchecked(&format!("systemctl {args}"))?.stdout_text())
    };
    let localdns_ready = if joined.deployed.config.local_dns.as_ref().and_then(|l| l.enabled) == Some(true) {
        let usec = show(&format!(
            "--machine={machine} show -p ActiveEnterTimestampMonotonic --value localdns.service"
        ))?;
        usec.trim()
            .parse()
            .ok()
            .and_then(|u| since_start(joined.deployed.start_uptime, u))
    } else {
        None
    };
    let (guest_total, available) = meminfo(&vm.run("cat /proc/meminfo")?).unwrap_or_default();
    let machine_mem = memory_current(&show(&format!(
        "show -p MemoryCurrent --value systemd-nspawn@{machine}.service"
    ))?);
    let localdns = memory_current(&show(&format!(
        "--machine={machine} show -p MemoryCurrent --value localdns.service"
    ))?);
    let qemu_rss = std::fs::read_to_string(format!("/proc/{}/status", vm.pid()))
        .ok()
        .and_then(|s| vm_rss(&s));
    Ok(NodeFigures {
        start: joined.deployed.start_took,
        localdns_ready,
        node_ready: joined.ready_after,
        guest_used: guest_total.saturating_sub(available),
        guest_total,
        machine: machine_mem,
        localdns,
        qemu_rss,
    })
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), |b| format!("{} MiB", b / (1024 * 1024)))
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("- (LocalDNS off)".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

impl NodeFigures {
    /// The figures as a two-column table.
    pub fn table(&self) -> String {
        [
            (
                "`start` (invocation to exit, kubelet active)",
                secs(Some(self.start)),
            ),
            (
                "`start` to LocalDNS ready (localdns.service active)",
                secs(self.localdns_ready),
            ),
            ("`start` to Node Ready", secs(Some(self.node_ready))),
            (
                "guest memory in use (MemTotal - MemAvailable)",
                format!(
                    "{} of {}",
                    mib(Some(self.guest_used)),
                    mib(Some(self.guest_total))
                ),
            ),
            ("machine cgroup (systemd-nspawn@kube1)", mib(self.machine)),
            ("localdns.service in the machine", mib(self.localdns)),
            ("QEMU RSS on the host", mib(self.qemu_rss)),
        ]
        .iter()
        .map(|(what, value)| format!("| {what} | {value} |\n"))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_gives_total_and_available_in_bytes() {
        let text = "MemTotal:        2014532 kB\nMemFree:          100000 kB\nMemAvailable:    1500000 kB\n";
        assert_eq!(meminfo(text), Some((2014532 * 1024, 1500000 * 1024)));
        assert_eq!(meminfo("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn vm_rss_and_memory_current_parse_or_say_nothing() {
        assert_eq!(vm_rss("Name:\tqemu\nVmRSS:\t  614400 kB\n"), Some(614400 * 1024));
        assert_eq!(vm_rss("Name:\tqemu\n"), None);
        assert_eq!(memory_current("31457280\n"), Some(31457280));
        assert_eq!(memory_current("[not set]\n"), None);
    }

    #[test]
    fn since_start_is_the_monotonic_time_after_the_start_uptime() {
        assert_eq!(since_start(100.5, 130_500_000), Some(Duration::from_secs(30)));
        assert_eq!(
            since_start(100.0, 0),
            None,
            "0 means the unit never became active"
        );
        assert_eq!(
            since_start(100.0, 50_000_000),
            None,
            "before start: not this start's"
        );
    }
}
