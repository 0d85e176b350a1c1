//! The supervisor's life: start CoreDNS, wait until healthy, `READY=1`, then watchdog ticks (and
//! CoreDNS started again whenever it exits) until the failure rule gives up or SIGTERM asks it to
//! stop.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Child;
use tokio::signal::unix::{SignalKind, signal};

use super::alive::{self, AliveLine};
use super::coredns::{
    Outcome, SuperviseError, describe, sleep_until_some, spawn_coredns, start_coredns, stop_coredns, stopped,
    until_healthy,
};
use super::failures::{FailureWindow, Verdict};
use super::fallback::fall_back;
use super::last_words::LastWords;
use super::metrics_endpoint;
use super::reload::{self, Reloaded};
use super::standby::{Keeper, StandbySlot};
use super::stuck::{self, StuckWatch};
use super::tally::{SharedTally, Tally, update};
use super::{Settings, notify, probe};

/// How many times in a row a CoreDNS started again after a crash may exit before it is healthy
/// before the supervisor ends (and systemd restarts the unit).
const MAX_FAILED_STARTS: u32 = 3;
/// The pause before the n-th start in a row of a CoreDNS that exited before it was healthy (n × this).
const RESTART_BACKOFF: Duration = Duration::from_millis(200);
/// After a failed health check, the next comes this soon (or after the interval, if shorter).
const RECHECK: Duration = Duration::from_secs(1);
/// How long a standby that took over may take to become healthy (or the start timeout, if
/// shorter) before it is taken for one whose reload failed (a Corefile CoreDNS refuses leaves it
/// serving its placeholder) and a new CoreDNS is started instead.
const TAKE_OVER_TIMEOUT: Duration = Duration::from_secs(15);

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
