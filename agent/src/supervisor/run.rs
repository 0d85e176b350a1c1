//! The supervisor's life: start CoreDNS, wait until healthy, `READY=1`, then watchdog ticks until
//! CoreDNS exits, the failure rule gives up, or SIGTERM asks it to stop.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use super::failures::{FailureWindow, Verdict};
use super::{Settings, notify, probe};

/// How often the start phase polls the listeners.
const START_POLL: Duration = Duration::from_millis(200);
/// How long CoreDNS may take to exit after SIGINT (the unit's `TimeoutStopSec=30` minus a margin).
const STOP_GRACE: Duration = Duration::from_secs(25);

/// How the supervisor ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// SIGTERM or SIGINT: CoreDNS was stopped with SIGINT. Exit 0.
    Stopped,
    /// CoreDNS exited by itself. Exit with its code (128+signal when killed; 1 when it exited 0).
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

/// Runs CoreDNS under supervision until it ends; see [`Outcome`] for the ways it can end.
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
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + settings.start_timeout;
    let mut last_error = String::from("no check has run yet");
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(SuperviseError::Wait)?;
                tracing::error!(%status, "CoreDNS exited before it became healthy");
                return Ok(Outcome::CoreDnsExited(status));
            }
            _ = term.recv() => return stopped(&mut child).await,
            _ = int.recv() => return stopped(&mut child).await,
            _ = tokio::time::sleep_until(deadline) => {
                tracing::error!(timeout = ?settings.start_timeout, %last_error, "CoreDNS did not become healthy in time");
                notify::status(&format!("CoreDNS not healthy after {:?}: {last_error}", settings.start_timeout));
                stop_coredns(&mut child).await?;
                return Ok(Outcome::StartTimedOut { last_error });
            }
            result = probe::check(settings) => match result {
                Ok(()) => break,
                Err(errors) => {
                    last_error = describe(&errors);
                    tokio::time::sleep(START_POLL).await;
                }
            }
        }
    }
    let status = format!(
        "CoreDNS healthy on {} and {} after {:.1?}",
        settings.node_listener,
        settings.cluster_listener,
        started.elapsed()
    );
    tracing::info!("{status}");
    notify::ready(&status);

    // Watchdog: one check per tick; pass → WATCHDOG=1, failures counted in the window.
    let mut failures = FailureWindow::new(settings.failure_window, settings.failure_threshold);
    let mut ticks = tokio::time::interval(settings.check_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(SuperviseError::Wait)?;
                tracing::error!(%status, "CoreDNS exited");
                return Ok(Outcome::CoreDnsExited(status));
            }
            _ = term.recv() => return stopped(&mut child).await,
            _ = int.recv() => return stopped(&mut child).await,
            _ = ticks.tick() => {
                match probe::check(settings).await {
                    Ok(()) => notify::watchdog(),
                    Err(errors) => {
                        let last_error = describe(&errors);
                        match failures.record_failure(Instant::now()) {
                            Verdict::Tolerate { failures_in_window } => {
                                tracing::warn!(failures_in_window, %last_error, "health check failed");
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
