//! Messages to systemd over `$NOTIFY_SOCKET` (no-ops when it is unset).

use sd_notify::NotifyState;

fn send(states: &[NotifyState]) {
    if let Err(err) = sd_notify::notify(states) {
        tracing::warn!(%err, "could not notify systemd");
    }
}

/// `READY=1` with a status line.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// `WATCHDOG=1`: the checks passed.
pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// `WATCHDOG=trigger` with the reason: systemd treats the unit as failed by its watchdog.
pub fn trigger(status: &str) {
    send(&[NotifyState::Status(status), NotifyState::WatchdogTrigger]);
}

/// `STOPPING=1`.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// `STATUS=...` only.
pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}
