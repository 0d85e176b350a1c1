//! The supervisor's life: start CoreDNS, wait until healthy, `READY=1`, then watchdog ticks (and
//! CoreDNS started again whenever it exits) until the failure rule gives up or SIGTERM asks it to
//! stop.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use super::failures::{FailureWindow, Verdict};
use super::{Settings, notify, probe};

/// How often the listeners are polled while CoreDNS starts (after a crash, the wait between
/// CoreDNS listening and DNS counted as back).
const START_POLL: Duration = Duration::from_millis(50);
/// How many times in a row a CoreDNS started again after a crash may exit before it is healthy
/// before the supervisor ends (and systemd restarts the unit).
const MAX_FAILED_STARTS: u32 = 3;
/// The pause before the n-th start in a row of a CoreDNS that exited before it was healthy (n × this).
const RESTART_BACKOFF: Duration = Duration::from_millis(200);
/// How long CoreDNS may take to exit after SIGINT (the unit's `TimeoutStopSec=30` minus a margin).
const STOP_GRACE: Duration = Duration::from_secs(25);
/// After a failed health check, the next comes this soon (or after the interval, if shorter).
const RECHECK: Duration = Duration::from_secs(1);

/// How the supervisor ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// SIGTERM or SIGINT: CoreDNS was stopped with SIGINT. Exit 0.
    Stopped,
    /// CoreDNS exited by itself before it was healthy (at the start, or started again after a
    /// crash). Exit with its code (128+signal when killed; 1 when it exited 0).
    CoreDnsExited(ExitStatus),
    /// Not healthy within the start timeout. Exit 3.
    StartTimedOut { last_error: String },
    /// The failure rule was reached after `READY=1`. Exit 4.
    GaveUp { failures: usize, last_error: String },
}

impl Outcome {
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Stopped => 0,
            Outcome::CoreDnsExited(status) => match (status.code(), status.signal()) {
                (Some(0), _) => 1,
                (Some(code), _) => u8::try_from(code).unwrap_or(1),
                (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
                (None, None) => 1,
            },
            Outcome::StartTimedOut { .. } => 3,
            Outcome::GaveUp { .. } => 4,
        }
    }
}

/// The supervisor could not do its job at all.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("cannot start CoreDNS {path}: {source}")]
    Spawn { path: String, source: std::io::Error },
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("cannot wait for CoreDNS: {0}")]
    Wait(std::io::Error),
}

fn describe(errors: &[probe::ProbeError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn start_coredns(settings: &Settings) -> Result<Child, SuperviseError> {
    tracing::info!(coredns = %settings.coredns.display(), corefile = %settings.corefile.display(), "starting CoreDNS");
    Command::new(&settings.coredns)
        .arg("-conf")
        .arg(&settings.corefile)
        // CoreDNS does not speak sd_notify; keep systemd's socket to ourselves.
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| SuperviseError::Spawn {
            path: settings.coredns.display().to_string(),
            source,
        })
}

/// SIGINT to CoreDNS, then wait for it (SIGKILL after the grace period).
async fn stop_coredns(child: &mut Child) -> Result<(), SuperviseError> {
    if let Some(pid) = child.id() {
        let pid = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
        if let Err(err) = kill(pid, Signal::SIGINT) {
            tracing::warn!(%err, "could not send SIGINT to CoreDNS");
        }
    }
    match tokio::time::timeout(STOP_GRACE, child.wait()).await {
        Ok(status) => {
            let status = status.map_err(SuperviseError::Wait)?;
            tracing::info!(%status, "CoreDNS stopped");
        }
        Err(_) => {
            tracing::warn!("CoreDNS did not stop within {STOP_GRACE:?} of SIGINT; killing it");
            let _ = child.kill().await;
        }
    }
    Ok(())
}

/// Polls both listeners until they pass, within the start timeout; CoreDNS exiting, the timeout or
/// SIGTERM/SIGINT end the wait with the supervisor's outcome (`Err`). `Ok` holds how long it took.
async fn until_healthy(
    child: &mut Child,
    settings: &Settings,
    term: &mut tokio::signal::unix::Signal,
    int: &mut tokio::signal::unix::Signal,
) -> Result<Result<Duration, Outcome>, SuperviseError> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + settings.start_timeout;
    let mut last_error = String::from("no check has run yet");
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(SuperviseError::Wait)?;
                tracing::error!(%status, "CoreDNS exited before it became healthy");
                return Ok(Err(Outcome::CoreDnsExited(status)));
            }
            _ = term.recv() => return Ok(Err(stopped(child).await?)),
            _ = int.recv() => return Ok(Err(stopped(child).await?)),
            _ = tokio::time::sleep_until(deadline) => {
                tracing::error!(timeout = ?settings.start_timeout, %last_error, "CoreDNS did not become healthy in time");
                notify::status(&format!("CoreDNS not healthy after {:?}: {last_error}", settings.start_timeout));
                stop_coredns(child).await?;
                return Ok(Err(Outcome::StartTimedOut { last_error }));
            }
            result = probe::check(settings) => match result {
                Ok(()) => return Ok(Ok(started.elapsed())),
                Err(errors) => {
                    last_error = describe(&errors);
                    tokio::time::sleep(START_POLL).await;
                }
            }
        }
    }
}

/// Runs CoreDNS under supervision until it ends; see [`Outcome`] for the ways it can end.
///
/// After `READY=1`, CoreDNS exiting by itself (a crash, SIGKILL, the OOM killer) is answered by
/// starting it again at once, in the unit's running sandbox — no unit restart, no `RestartSec`:
/// DNS is back as soon as CoreDNS answers. A CoreDNS started again must become healthy as at the
/// start; if it exits first it is started again (after a short pause), but the third such exit in
/// a row, or no health within the start timeout, ends the supervisor (exit with CoreDNS's status,
/// or 3) and systemd restarts the unit, so a crash loop cannot spin here.
///
/// A hung CoreDNS (alive, answering nothing: SIGSTOP, a deadlock) is found by the health checks:
/// a failed check is repeated after [`RECHECK`], and after `hung_after_failed_checks` failures in
/// a row (3; [`Settings`]) CoreDNS is killed with SIGKILL and started again as after a crash —
/// without waiting for systemd's watchdog to restart the whole unit: a CoreDNS that answers
/// neither `/ready` nor its own health name for that long serves nobody. Every failed check counts
/// towards the failure rule, so a CoreDNS that keeps hanging ends in a restart of the unit.
pub async fn supervise(settings: &Settings) -> Result<Outcome, SuperviseError> {
    let mut term = signal(SignalKind::terminate()).map_err(SuperviseError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(SuperviseError::Signals)?;
    if settings.watchdog_enabled {
        tracing::info!(
            "systemd watchdog on: a health check every {:?}, WATCHDOG=1 after each that passes",
            settings.check_interval
        );
    } else {
        tracing::info!(
            "no systemd watchdog for this process: a health check every {:?}",
            settings.check_interval
        );
    }
    let mut child = start_coredns(settings)?;

    // Start: poll until both listeners pass, within the start timeout.
    let took = match until_healthy(&mut child, settings, &mut term, &mut int).await? {
        Ok(took) => took,
        Err(outcome) => return Ok(outcome),
    };
    let status = format!(
        "CoreDNS healthy on {} and {} after {took:.1?}",
        settings.node_listener, settings.cluster_listener,
    );
    tracing::info!("{status}");
    notify::ready(&status);

    // Watchdog: one check per interval; pass → WATCHDOG=1, failures counted in the window. A
    // failed check is followed by quick rechecks; CoreDNS failing `hung_after_failed_checks` in a
    // row is killed. CoreDNS exiting (by itself or killed) is answered by starting it again.
    let mut failures = FailureWindow::new(settings.failure_window, settings.failure_threshold);
    let mut restarts = 0u64;
    let mut failed_in_a_row = 0u32;
    let mut next_check = tokio::time::Instant::now() + settings.check_interval;
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(SuperviseError::Wait)?;
                restarts += 1;
                failed_in_a_row = 0;
                tracing::error!(%status, restarts, "CoreDNS exited; starting it again");
                notify::status(&format!("CoreDNS exited ({status}); starting it again (restart {restarts})"));
                let mut failed_starts = 0;
                loop {
                    child = start_coredns(settings)?;
                    match until_healthy(&mut child, settings, &mut term, &mut int).await? {
                        Ok(took) => {
                            let status = format!(
                                "CoreDNS healthy again on {} and {} after {took:.1?}",
                                settings.node_listener, settings.cluster_listener,
                            );
                            tracing::info!("{status}");
                            notify::status(&status);
                            notify::watchdog();
                            next_check = tokio::time::Instant::now() + settings.check_interval;
                            break;
                        }
                        Err(Outcome::CoreDnsExited(status)) if failed_starts + 1 < MAX_FAILED_STARTS => {
                            failed_starts += 1;
                            tracing::warn!(%status, failed_starts, "CoreDNS exited again before it was healthy; starting it again");
                            tokio::time::sleep(RESTART_BACKOFF * failed_starts).await;
                        }
                        Err(outcome) => return Ok(outcome),
                    }
                }
            }
            _ = term.recv() => return stopped(&mut child).await,
            _ = int.recv() => return stopped(&mut child).await,
            _ = tokio::time::sleep_until(next_check) => {
                match probe::check(settings).await {
                    Ok(()) => {
                        if failed_in_a_row > 0 {
                            tracing::info!(failed_in_a_row, "health check passed again");
                        }
                        failed_in_a_row = 0;
                        next_check = tokio::time::Instant::now() + settings.check_interval;
                        notify::watchdog();
                    }
                    Err(errors) => {
                        let last_error = describe(&errors);
                        failed_in_a_row += 1;
                        next_check = tokio::time::Instant::now() + RECHECK.min(settings.check_interval);
                        match failures.record_failure(Instant::now()) {
                            Verdict::Tolerate { failures_in_window } => {
                                tracing::warn!(failures_in_window, failed_in_a_row, %last_error, "health check failed");
                                let hung_after = settings.hung_after_failed_checks;
                                if hung_after > 0 && failed_in_a_row >= hung_after {
                                    let why = format!(
                                        "CoreDNS failed {failed_in_a_row} health checks in a row: taking it for hung, killing it: {last_error}"
                                    );
                                    tracing::error!("{why}");
                                    notify::status(&why);
                                    failed_in_a_row = 0;
                                    // Its exit is then seen like a crash: CoreDNS is started again.
                                    if let Err(err) = child.start_kill() {
                                        tracing::warn!(%err, "could not kill CoreDNS");
                                    }
                                }
                            }
                            Verdict::GiveUp { failures_in_window } => {
                                let why = format!(
                                    "{failures_in_window} failed health checks within {:?}, giving up: {last_error}",
                                    settings.failure_window
                                );
                                tracing::error!("{why}");
                                notify::trigger(&why);
                                stop_coredns(&mut child).await?;
                                return Ok(Outcome::GaveUp { failures: failures_in_window, last_error });
                            }
                        }
                    }
                }
            }
        }
    }
}

async fn stopped(child: &mut Child) -> Result<Outcome, SuperviseError> {
    tracing::info!("asked to stop; sending SIGINT to CoreDNS");
    notify::stopping();
    stop_coredns(child).await?;
    Ok(Outcome::Stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_coredns_and_the_rule() {
        assert_eq!(Outcome::Stopped.exit_code(), 0);
        assert_eq!(
            Outcome::CoreDnsExited(ExitStatus::from_raw(2 << 8)).exit_code(),
            2
        );
        assert_eq!(Outcome::CoreDnsExited(ExitStatus::from_raw(9)).exit_code(), 137);
        assert_eq!(Outcome::CoreDnsExited(ExitStatus::from_raw(0)).exit_code(), 1);
        assert_eq!(
            Outcome::GaveUp {
                failures: 10,
                last_error: String::new()
            }
            .exit_code(),
            4
        );
    }
}
