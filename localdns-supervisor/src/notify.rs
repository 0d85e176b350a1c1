//! Messages to systemd over `$NOTIFY_SOCKET` (no-ops when it is unset). While the supervisor
//! serves the fallback Corefile ([`set_degraded`]), every status line begins with `degraded`
//! and the reason, so `systemctl status localdns` never shows a healthy line alone.

use std::sync::Mutex;

use sd_notify::NotifyState;

/// Why the fallback serves, while it does.
static DEGRADED: Mutex<Option<String>> = Mutex::new(None);

/// The prefix every status line gets while [`DEGRADED`] is set.
pub const DEGRADED_PREFIX: &str = "degraded";

/// From now on, status lines say the supervisor is degraded because of `why` (`None`: no longer).
pub fn set_degraded(why: Option<String>) {
    *DEGRADED.lock().unwrap_or_else(|e| e.into_inner()) = why;
}

/// Why the supervisor is degraded, if it is.
pub fn degraded() -> Option<String> {
    DEGRADED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// `status` as systemd is told it: with the degraded prefix while degraded.
pub fn status_line(status: &str) -> String {
    match degraded() {
        Some(why) => format!("{DEGRADED_PREFIX} ({why}): {status}"),
        None => status.to_owned(),
    }
}

fn send(states: &[NotifyState]) {
    if let Err(err) = sd_notify::notify(states) {
        tracing::warn!(%err, "could not notify systemd");
    }
}

/// Held by unit tests that set or read [`DEGRADED`], so that tests run as threads of one process
/// (`cargo test`) do not see each other's.
#[cfg(test)]
pub(crate) static TEST_LOCK: Mutex<()> = Mutex::new(());

/// `READY=1` with a status line.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(&status_line(status))]);
}

/// `WATCHDOG=1`: the checks passed.
pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// `WATCHDOG=trigger` with the reason: systemd treats the unit as failed by its watchdog.
pub fn trigger(status: &str) {
    send(&[
        NotifyState::Status(&status_line(status)),
        NotifyState::WatchdogTrigger,
    ]);
}

/// `STOPPING=1`.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// `STATUS=...` only.
pub fn status(status: &str) {
    send(&[NotifyState::Status(&status_line(status))]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_degraded_supervisor_says_so_first_in_every_status_line() {
        let _held = TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!(status_line("CoreDNS healthy"), "CoreDNS healthy");
        set_degraded(Some("CoreDNS refused /etc/Corefile: plugin/cache: bad".into()));
        assert_eq!(
            status_line("CoreDNS healthy"),
            "degraded (CoreDNS refused /etc/Corefile: plugin/cache: bad): CoreDNS healthy"
        );
        set_degraded(None);
        assert_eq!(status_line("CoreDNS healthy"), "CoreDNS healthy");
    }
}
