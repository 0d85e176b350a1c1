//! How long the machine's systemd waits for what it stops: its manager's `DefaultTimeoutStopSec`.

use super::HEADER;

/// The manager drop-in inside the machine, read when the machine's systemd starts.
pub const DROP_IN: &str = "/etc/systemd/system.conf.d/50-unbounded-stop.conf";
/// Seconds between the SIGTERM and the SIGKILL for whatever the machine's systemd stops without a
/// timeout of its own.
pub const STOP_SECS: u32 = 10;

/// [`DROP_IN`]: `DefaultTimeoutStopSec=` [`STOP_SECS`] for the machine's systemd, instead of 90 s.
///
/// When the machine stops (a managed reboot, a repave, a reset, the host shutting down) kubelet is
/// already gone, so no pod's own grace period applies. Two waits used the default and held the
/// stop for 90 s whenever a process ignored SIGTERM (a container whose PID 1 is `sleep`):
/// * each container's transient `cri-containerd-<id>.scope` (runc sets no timeout of its own);
/// * the final "Sending SIGTERM to remaining processes" of the machine's shutdown, which waits
///   `DefaultTimeoutStopSec` for processes outside any unit that stopped them, e.g. a container
///   whose scope was gone after its pod was deleted while kubelet stopped (a repave after the
///   Node's deletion).
///
/// Units with their own `TimeoutStopSec=` (the LocalDNS services) keep it.
pub fn conf() -> String {
    format!(
        "{HEADER}[Manager]
DefaultTimeoutStopSec={STOP_SECS}s
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machines_systemd_gives_what_it_stops_ten_seconds_before_sigkill() {
        let path = std::path::Path::new(DROP_IN);
        // A drop-in of the manager's `system.conf`, not of a unit.
        assert_eq!(
            path.parent().and_then(|d| d.to_str()),
            Some("/etc/systemd/system.conf.d")
        );
        let text = conf();
        let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(body, ["[Manager]", "DefaultTimeoutStopSec=10s"], "{text}");
    }
}
