//! One CoreDNS process and how a supervision of it ends: started with its standard error kept
//! ([`start_coredns`]), awaited until both listeners are its own and healthy ([`until_healthy`]),
//! stopped with a grace period ([`stop_coredns`]); the [`Outcome`] and [`SuperviseError`] every
//! part of the supervisor (the run loop, reloads, the fallback, the spare) speaks in.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::last_words::LastWords;
use super::{Settings, notify, probe};

/// How often the listeners are polled while CoreDNS starts (after a crash, the wait between
/// CoreDNS listening and DNS counted as back). Until both listeners have their sockets the poll
/// only asks the kernel for the bound sockets ([`listeners_bound`]): four probes every 50 ms took
/// a quarter of an emulated CPU from the CoreDNS taking over.
const START_POLL: Duration = Duration::from_millis(50);
/// How long CoreDNS may take to exit after SIGINT (the unit's `TimeoutStopSec=30` minus a margin).
const STOP_GRACE: Duration = Duration::from_secs(25);

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

pub(super) fn describe(errors: &[probe::ProbeError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Starts `coredns -conf <corefile>` with `stdout` (the supervisor's own, or a pipe) and `stderr`.
pub(super) fn spawn_coredns(
    coredns: &std::path::Path,
    corefile: &std::path::Path,
    stdout: Stdio,
    stderr: Stdio,
) -> std::io::Result<Child> {
    Command::new(coredns)
        .arg("-conf")
        .arg(corefile)
        // CoreDNS does not speak sd_notify; keep systemd's socket to ourselves.
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
}

/// Starts the CoreDNS that serves `settings.corefile`; what it writes to its standard error goes
/// on to the supervisor's through `last_words`, which keeps the last line (the reason CoreDNS
/// gives when it refuses the Corefile).
pub(super) fn start_coredns(settings: &Settings, last_words: &LastWords) -> Result<Child, SuperviseError> {
    tracing::info!(coredns = %settings.coredns.display(), corefile = %settings.corefile.display(), "starting CoreDNS");
    let mut child = spawn_coredns(
        &settings.coredns,
        &settings.corefile,
        Stdio::inherit(),
        Stdio::piped(),
    )
    .map_err(|source| SuperviseError::Spawn {
        path: settings.coredns.display().to_string(),
        source,
    })?;
    if let Some(stderr) = child.stderr.take() {
        last_words.follow(stderr);
    }
    Ok(child)
}

/// SIGINT to CoreDNS, then wait for it (SIGKILL after the grace period).
pub(super) async fn stop_coredns(child: &mut Child) -> Result<(), SuperviseError> {
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

/// Polls both listeners until they pass, within `timeout`; CoreDNS exiting, the timeout (CoreDNS is
/// then stopped) or SIGTERM/SIGINT end the wait with the supervisor's outcome (`Err`). `Ok` holds
/// how long it took.
pub(super) async fn until_healthy(
    child: &mut Child,
    settings: &Settings,
    timeout: Duration,
    term: &mut tokio::signal::unix::Signal,
    int: &mut tokio::signal::unix::Signal,
) -> Result<Result<Duration, Outcome>, SuperviseError> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_error = String::from("no check has run yet");
    let pid = child.id();
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
                tracing::error!(?timeout, %last_error, "CoreDNS did not become healthy in time");
                notify::status(&format!("CoreDNS not healthy after {timeout:?}: {last_error}"));
                stop_coredns(child).await?;
                return Ok(Err(Outcome::StartTimedOut { last_error }));
            }
            result = async {
                match listeners_bound(settings, pid) {
                    Ok(()) => probe::check(settings).await.map_err(|errors| describe(&errors)),
                    Err(short) => Err(short),
                }
            } => match result {
                Ok(()) => return Ok(Ok(started.elapsed())),
                Err(error) => {
                    last_error = error;
                    tokio::time::sleep(START_POLL).await;
                }
            }
        }
    }
}

/// Whether CoreDNS `pid` itself holds a UDP and a TCP socket on port 53 of both listeners (cheap:
/// a `sock_diag` dump and its `/proc/<pid>/fd`, no packet); `Err` names what is missing. Its own
/// sockets, not any: during a planned restart another CoreDNS (the bridge's, the unit's) answers
/// on the same listeners, so the probes alone would pass for a CoreDNS that never bound them (one
/// that refuses its Corefile and exits). Descriptors that cannot be read, or a failed dump, count
/// as bound: the probes decide.
fn listeners_bound(settings: &Settings, pid: Option<u32>) -> Result<(), String> {
    let Some(pid) = pid else {
        return Ok(());
    };
    let Some(inodes) = node_base::sockets::socket_inodes(pid) else {
        return Ok(());
    };
    let Ok(bound) = node_base::sockets::bound_among(&inodes, super::settings::DNS_PORT) else {
        return Ok(());
    };
    let short = node_base::sockets::short_of(&bound, &settings.listeners(), super::settings::DNS_PORT, 1);
    if short.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "CoreDNS {pid} is not listening yet: {}",
            short.join(", ")
        ))
    }
}

/// Sleeps until `at` (forever when `None`).
pub(super) async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// SIGTERM or SIGINT while CoreDNS starts or serves: it is stopped, the supervisor ends.
pub(super) async fn stopped(child: &mut Child) -> Result<Outcome, SuperviseError> {
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
