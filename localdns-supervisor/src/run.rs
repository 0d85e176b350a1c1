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

use super::alive::{self, AliveLine};
use super::failures::{FailureWindow, Verdict};
use super::fallback::fall_back;
use super::last_words::LastWords;
use super::metrics_endpoint;
use super::reload::{self, Reloaded};
use super::standby::{Keeper, StandbySlot};
use super::stuck::{self, StuckWatch};
use super::tally::{SharedTally, Tally, update};
use super::{Settings, notify, probe};

/// How often the listeners are polled while CoreDNS starts (after a crash, the wait between
/// CoreDNS listening and DNS counted as back). Until both listeners have their sockets the poll
/// only asks the kernel for the bound sockets ([`listeners_bound`]): four probes every 50 ms took
/// a quarter of an emulated CPU from the CoreDNS taking over.
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
/// How long a standby that took over may take to become healthy (or the start timeout, if
/// shorter) before it is taken for one whose reload failed (a Corefile CoreDNS refuses leaves it
/// serving its placeholder) and a new CoreDNS is started instead.
const TAKE_OVER_TIMEOUT: Duration = Duration::from_secs(15);

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

/// Runs CoreDNS under supervision until it ends; see [`Outcome`] for the ways it can end.
///
/// After `READY=1`, CoreDNS exiting by itself (a crash, SIGKILL, the OOM killer) is answered by
/// starting it again at once, in the unit's running sandbox — no unit restart, no `RestartSec`:
/// DNS is back as soon as CoreDNS answers. A CoreDNS started again must become healthy as at the
/// start; if it exits first it is started again (after a short pause), but the third such exit in
/// a row, or no health within the start timeout, ends the supervisor (exit with CoreDNS's status,
/// or 3) and systemd restarts the unit, so a crash loop cannot spin here.
///
/// With a runtime directory ([`Settings::standby_dir`]) a warm standby CoreDNS is kept started
/// beside the active one ([`super::standby`]); when the active one exits, the standby is given the
/// real Corefile and reloads it in its running process instead of a new CoreDNS being started
/// (if it cannot, a new CoreDNS is started as without one), and another standby is started.
///
/// A hung CoreDNS (alive, answering nothing: SIGSTOP, a deadlock) is found two ways. As soon as
/// clients wait: queries sitting in its listener sockets at every look for `stuck_after` (1 s)
/// while it uses no CPU time, or at two looks in a row while the kernel shows it stopped
/// ([`stuck`]), get it killed at once. Without clients, by the health checks (whose own query
/// then waits too): a failed check is repeated after [`RECHECK`], and after
/// `hung_after_failed_checks` failures in a row (3; [`Settings`]) CoreDNS is killed with SIGKILL
/// and started again as after a crash —
/// without waiting for systemd's watchdog to restart the whole unit: a CoreDNS that answers
/// neither `/ready` nor its own health name for that long serves nobody. Every failed check counts
/// towards the failure rule, so a CoreDNS that keeps hanging ends in a restart of the unit.
pub async fn supervise(settings: &Settings) -> Result<Outcome, SuperviseError> {
    let mut term = signal(SignalKind::terminate()).map_err(SuperviseError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(SuperviseError::Signals)?;
    // SIGHUP: `systemctl reload` under `Type=notify-reload` ([`reload`]).
    let mut hup = signal(SignalKind::hangup()).map_err(SuperviseError::Signals)?;
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
    // What CoreDNS serves: the Corefile, or the fallback once CoreDNS refused it ([`fall_back`]).
    let mut serving = settings.clone();
    let mut last_words = LastWords::default();
    let tally: SharedTally = std::sync::Arc::new(std::sync::Mutex::new(Tally {
        serving: serving.corefile.clone(),
        ..Tally::default()
    }));
    metrics_endpoint::spawn(settings, tally.clone());
    let mut child = start_coredns(&serving, &last_words)?;
    let mut standby = StandbySlot::new(settings, Keeper::Supervisor);

    // Start: poll until both listeners pass, within the start timeout; a CoreDNS that cannot
    // serve the Corefile is given the fallback, as once.
    let took = loop {
        match until_healthy(&mut child, &serving, serving.start_timeout, &mut term, &mut int).await? {
            Ok(took) => break took,
            Err(outcome) => {
                if !fall_back(&mut serving, &outcome, &last_words).await {
                    return Ok(outcome);
                }
                update(&tally, |t| t.serving = serving.corefile.clone());
                child = start_coredns(&serving, &last_words)?;
            }
        }
    };
    // The full Corefile's text while it serves: what a refused reload leaves serving.
    let mut last_good = (serving.corefile == settings.corefile)
        .then(|| std::fs::read_to_string(&settings.corefile).ok())
        .flatten();
    let status = format!(
        "CoreDNS healthy on {} and {} after {took:.1?}",
        settings.node_listener, settings.cluster_listener,
    );
    tracing::info!("{status}");
    notify::ready(&status);
    // From now on the spare (`localdns-spare.service`) may watch this supervisor's life.
    let mut alive = open_alive_line(settings);

    // Watchdog: one check per interval; pass → WATCHDOG=1, failures counted in the window. A
    // failed check is followed by quick rechecks; CoreDNS failing `hung_after_failed_checks` in a
    // row is killed. CoreDNS exiting (by itself or killed) is answered by starting it again.
    let mut failures = FailureWindow::new(settings.failure_window, settings.failure_threshold);
    let mut restarts = 0u64;
    let mut failed_in_a_row = 0u32;
    let mut next_check = tokio::time::Instant::now() + settings.check_interval;
    let mut stuck_watch = StuckWatch::default();
    let mut next_look = settings
        .stuck_poll()
        .map(|poll| tokio::time::Instant::now() + poll);
    // The health check in flight: polled beside the other branches, so that a check waiting on a
    // hung CoreDNS (up to the probe timeout) holds up neither the looks for waiting queries nor
    // the answer to CoreDNS exiting.
    let mut checking: Option<CheckInFlight<'_>> = None;
    loop {
        let standby_ready = standby.ready_pid().is_some();
        update(&tally, |t| t.standby_ready = standby_ready);
        let standby_wake = standby.next_wake();
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(SuperviseError::Wait)?;
                restarts += 1;
                let exited_at = Instant::now();
                update(&tally, |t| t.coredns_restarts += 1);
                failed_in_a_row = 0;
                // A check in flight asked the CoreDNS that is gone.
                checking = None;
                let mut taken_over = standby.take_over(&serving).await;
                if taken_over.is_some() {
                    update(&tally, |t| t.standby_ready = false);
                }
                let how = if taken_over.is_some() { "the standby takes over" } else { "starting it again" };
                tracing::error!(%status, restarts, "CoreDNS exited; {how}");
                notify::status(&format!("CoreDNS exited ({status}); {how} (restart {restarts})"));
                let mut failed_starts = 0;
                loop {
                    let promoted = taken_over.is_some();
                    let by = if promoted { " (the standby took over)" } else { "" };
                    let timeout = if promoted { TAKE_OVER_TIMEOUT.min(settings.start_timeout) } else { settings.start_timeout };
                    child = match taken_over.take() {
                        Some(standby_child) => standby_child,
                        None => start_coredns(&serving, &last_words)?,
                    };
                    match until_healthy(&mut child, &serving, timeout, &mut term, &mut int).await? {
                        Ok(took) => {
                            update(&tally, |t| {
                                t.last_recovery = Some(exited_at.elapsed());
                                t.standby_takeovers += u64::from(promoted);
                            });
                            let status = format!(
                                "CoreDNS healthy again on {} and {} after {took:.1?}{by}",
                                settings.node_listener, settings.cluster_listener,
                            );
                            tracing::info!("{status}");
                            notify::status(&status);
                            notify::watchdog();
                            next_check = tokio::time::Instant::now() + settings.check_interval;
                            stuck_watch.reset();
                            break;
                        }
                        Err(Outcome::StartTimedOut { last_error }) if promoted => {
                            tracing::warn!(%last_error, "the standby that took over is not healthy (its reload failed?); starting a new CoreDNS");
                        }
                        Err(Outcome::CoreDnsExited(status)) if failed_starts + 1 < MAX_FAILED_STARTS => {
                            failed_starts += 1;
                            tracing::warn!(%status, failed_starts, "CoreDNS exited again before it was healthy; starting it again");
                            tokio::time::sleep(RESTART_BACKOFF * failed_starts).await;
                        }
                        Err(outcome) => {
                            if fall_back(&mut serving, &outcome, &last_words).await {
                                update(&tally, |t| t.serving = serving.corefile.clone());
                                failed_starts = 0;
                                continue;
                            }
                            // The spare takes over while this supervisor ends.
                            drop(alive.take());
                            standby.stop().await;
                            return Ok(outcome);
                        }
                    }
                }
            }
            status = standby.exited() => {
                let status = status.map_err(SuperviseError::Wait)?;
                standby.on_exit(status);
            }
            _ = sleep_until_some(standby_wake), if standby_wake.is_some() => {
                standby.wake(settings, |corefile| spawn_coredns(&settings.coredns, corefile, Stdio::piped(), Stdio::inherit())).await;
            }
            _ = alive::accept_some(&mut alive) => {}
            _ = hup.recv() => {
                // A check in flight may ask the CoreDNS that stops.
                checking = None;
                match reload::reload(&mut child, &mut serving, &mut last_words, &mut last_good, settings, &mut term, &mut int).await? {
                    Reloaded::TookOver { .. } => {
                        update(&tally, |t| {
                            t.reloads += 1;
                            t.serving = serving.corefile.clone();
                        });
                        failed_in_a_row = 0;
                        stuck_watch.reset();
                        notify::watchdog();
                    }
                    Reloaded::Refused { .. } => update(&tally, |t| {
                        t.reloads_refused += 1;
                        t.serving = serving.corefile.clone();
                    }),
                    Reloaded::Stopped(_) => return stopped_on_purpose(&mut child, &mut standby, alive.take()).await,
                }
                next_check = tokio::time::Instant::now() + settings.check_interval;
            }
            _ = term.recv() => return stopped_on_purpose(&mut child, &mut standby, alive.take()).await,
            _ = int.recv() => return stopped_on_purpose(&mut child, &mut standby, alive.take()).await,
            _ = sleep_until_some(next_look), if next_look.is_some() => {
                let now = tokio::time::Instant::now();
                next_look = settings.stuck_poll().map(|poll| now + poll);
                let (Some(pid), Some(after)) = (child.id(), settings.stuck_after) else { continue };
                if let Some(stuck) = stuck_watch.observe(stuck::look(pid, settings), now, after) {
                    stuck_watch.reset();
                    let why = format!("{stuck}: taking it for hung, killing it");
                    tracing::error!("{why}");
                    notify::status(&why);
                    failed_in_a_row = 0;
                    // Its exit is then seen like a crash: the standby takes over, or CoreDNS is
                    // started again. It counts towards the failure rule like a failed check.
                    if let Verdict::GiveUp { failures_in_window } = failures.record_failure(Instant::now()) {
                        drop(alive.take());
                        return give_up(&mut child, &mut standby, settings, failures_in_window, why).await;
                    }
                    update(&tally, |t| t.hung_killed += 1);
                    if let Err(err) = child.start_kill() {
                        tracing::warn!(%err, "could not kill CoreDNS");
                    }
                }
            }
            _ = tokio::time::sleep_until(next_check), if checking.is_none() => {
                checking = Some(Box::pin(probe::check(settings)));
            }
            result = async { checking.as_mut().expect("polled only while a check is in flight").await }, if checking.is_some() => {
                checking = None;
                match result {
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
                                    update(&tally, |t| t.hung_killed += 1);
                                    if let Err(err) = child.start_kill() {
                                        tracing::warn!(%err, "could not kill CoreDNS");
                                    }
                                }
                            }
                            Verdict::GiveUp { failures_in_window } => {
                                drop(alive.take());
                                return give_up(&mut child, &mut standby, settings, failures_in_window, last_error).await;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A health check ([`probe::check`]) the watchdog loop polls beside its other branches.
type CheckInFlight<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Vec<probe::ProbeError>>> + 'a>>;

/// The failure rule was reached: `WATCHDOG=trigger`, both CoreDNS stopped, [`Outcome::GaveUp`].
async fn give_up(
    child: &mut Child,
    standby: &mut StandbySlot,
    settings: &Settings,
    failures_in_window: usize,
    last_error: String,
) -> Result<Outcome, SuperviseError> {
    let why = format!(
        "{failures_in_window} failed health checks within {:?}, giving up: {last_error}",
        settings.failure_window
    );
    tracing::error!("{why}");
    notify::trigger(&why);
    standby.stop().await;
    stop_coredns(child).await?;
    Ok(Outcome::GaveUp {
        failures: failures_in_window,
        last_error,
    })
}

/// Sleeps until `at` (forever when `None`).
pub(super) async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The line to the spare in the runtime directory, if there is one (a supervisor without a
/// standby, such as the restart bridge's, has none).
fn open_alive_line(settings: &Settings) -> Option<AliveLine> {
    let dir = settings.standby_dir.as_ref()?;
    match AliveLine::open(dir) {
        Ok(line) => Some(line),
        Err(err) => {
            tracing::warn!(%err, dir = %dir.display(), "cannot open the spare's line: no spare answers if this supervisor dies");
            None
        }
    }
}

/// SIGTERM or SIGINT: the spare is told first (it stands by), then both CoreDNS stop.
async fn stopped_on_purpose(
    child: &mut Child,
    standby: &mut StandbySlot,
    alive: Option<AliveLine>,
) -> Result<Outcome, SuperviseError> {
    if let Some(line) = alive {
        line.stopping().await;
    }
    standby.stop().await;
    stopped(child).await
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
