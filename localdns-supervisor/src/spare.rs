//! The spare (`localdns-spare.service`, `unbounded-localdns-supervisor spare /run/localdns`): a
//! warm standby CoreDNS in a unit of its own, which answers on the listeners when
//! `localdns.service`'s supervisor dies. With `KillMode=mixed` systemd kills everything of that
//! unit when its main process dies — its CoreDNS and its standby too — and starts it again only
//! after `RestartSec=2` and a CoreDNS start; the spare lives in another unit, so it survives.
//!
//! It keeps a connection to the supervisor's [`alive`] socket. When that connection closes
//! without [`alive::STOPPING`] (the supervisor died), its standby takes over with the real
//! Corefile (the same SIGUSR1 reload as the supervisor's own standby) and binds the listeners,
//! beside the dying unit's CoreDNS if that is still there (`SO_REUSEPORT`, the same user). Once
//! the restarted supervisor's CoreDNS is healthy (its socket accepts again) the spare stops its
//! CoreDNS and starts a new standby. A supervisor that stops on purpose (a stop, a planned
//! restart: the restart bridge answers then) makes the spare stand by: it does not answer, and
//! connects again when the supervisor is back. When the supervisor is not back within the hold
//! limit ([`DEFAULT_HOLD`], `LOCALDNS_SPARE_HOLD_SECS`; stopped for good, or failing to start), the
//! spare stops answering and exits; the next start of `localdns.service` starts it again
//! (`Wants=`).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;
use tokio::process::Child;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use super::coredns::{
    Outcome, SuperviseError, sleep_until_some, spawn_coredns, start_coredns, stop_coredns, until_healthy,
};
use super::fallback::{fall_back, switch_to_fallback};
use super::last_words::LastWords;
use super::standby::{Keeper, StandbySlot};
use super::{Settings, alive, notify};

/// The spare's unit.
pub const UNIT: &str = "localdns-spare.service";
/// The spare's journal line when it connected to a supervisor (not answering).
pub const CONNECTED: &str = "connected to the supervisor";
/// Its line when the supervisor stopped on purpose.
pub const STANDS_BY: &str = "the supervisor stops on purpose: the spare stands by until it is back";
/// Its line when the supervisor died and its standby takes over.
pub const TAKES_OVER: &str = "the supervisor died: the spare answers on the listeners until it is back";
/// Its line once both listeners answer after it took over.
pub const ANSWERS: &str = "both listeners answer (the spare)";
/// Its line when the restarted supervisor's CoreDNS holds the listeners and it stops its own.
pub const HANDS_BACK: &str =
    "the supervisor is back with its CoreDNS on the listeners: the spare hands back, stopping its CoreDNS";

/// The supervisor's argument that makes it the spare; the next is the runtime directory of the
/// supervisor it stands in for.
pub const ARG: &str = "spare";
/// How often the spare tries to connect while the supervisor's socket is not there.
const CONNECT_POLL: Duration = Duration::from_millis(250);
/// How long the spare waits for the supervisor to come back — answering on the listeners after its
/// death, standing by after its stop — before it exits.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(180);
/// The environment variable that sets the hold limit in seconds.
pub const HOLD_VAR: &str = "LOCALDNS_SPARE_HOLD_SECS";
/// How long the CoreDNS that takes over may take to answer on both listeners.
const TAKE_OVER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the spare waits, once the supervisor is back, for its CoreDNS's sockets beside the
/// spare's before it stops its own anyway.
const HAND_BACK_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the sockets are looked at meanwhile.
const HAND_BACK_POLL: Duration = Duration::from_millis(200);

/// What the spare does when its connection to the supervisor closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnClose {
    /// The supervisor said it stops: do not answer, wait for it to come back.
    StandBy,
    /// The supervisor died: answer on the listeners.
    TakeOver,
}

/// The decision when the connection closes, from whether the supervisor said it stops.
pub fn on_close(told_stopping: bool) -> OnClose {
    if told_stopping {
        OnClose::StandBy
    } else {
        OnClose::TakeOver
    }
}

/// Whether what the supervisor wrote so far says it stops.
pub fn says_stopping(received: &[u8]) -> bool {
    received
        .windows(alive::STOPPING.len())
        .any(|w| w == alive::STOPPING)
}

/// The spare's CoreDNS while it answers, and since when.
struct Serving {
    child: Child,
    since: Instant,
}

/// Reads from the connection to the supervisor (forever without one).
async fn read_some(watching: &mut Option<UnixStream>, buf: &mut [u8]) -> std::io::Result<usize> {
    match watching {
        Some(stream) => stream.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Waits for the serving CoreDNS to exit (forever when none serves).
async fn serving_exited(serving: &mut Option<Serving>) -> std::io::Result<std::process::ExitStatus> {
    match serving {
        Some(s) => s.child.wait().await,
        None => std::future::pending().await,
    }
}

/// The hold limit from [`HOLD_VAR`] (whole seconds), or [`DEFAULT_HOLD`].
pub fn hold_from(value: Option<&str>) -> Result<Duration, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(DEFAULT_HOLD),
        Some(v) => v
            .parse()
            .map(Duration::from_secs)
            .map_err(|_| format!("{HOLD_VAR}={v:?} is not a number of seconds")),
    }
}

/// Runs the spare for the supervisor whose runtime directory is `supervisor_dir`, until it is
/// stopped or the supervisor has been gone for `hold`.
pub async fn keep_spare(
    settings: &Settings,
    supervisor_dir: &Path,
    hold: Duration,
) -> Result<Outcome, SuperviseError> {
    let mut term = signal(SignalKind::terminate()).map_err(SuperviseError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(SuperviseError::Signals)?;
    let socket = alive::socket_in(supervisor_dir);
    let mut standby = StandbySlot::new(settings, Keeper::Spare);
    let mut watching: Option<UnixStream> = None;
    let mut received: Vec<u8> = Vec::new();
    let mut serving: Option<Serving> = None;
    let mut next_connect = Instant::now();
    // Since when the spare has had no connection to the supervisor.
    let mut gone_since = Some(Instant::now());
    let mut buf = [0u8; 64];
    tracing::info!(socket = %socket.display(), "the spare watches the supervisor");
    notify::ready(&format!("watching the supervisor at {}", socket.display()));
    loop {
        let standby_wake = standby.next_wake();
        tokio::select! {
            status = standby.exited() => {
                let status = status.map_err(SuperviseError::Wait)?;
                standby.on_exit(status);
            }
            _ = sleep_until_some(standby_wake), if standby_wake.is_some() => {
                standby.wake(settings, |corefile| spawn_coredns(&settings.coredns, corefile, Stdio::piped(), Stdio::inherit())).await;
            }
            _ = term.recv() => return stand_down(&mut standby, &mut serving, "asked to stop").await,
            _ = int.recv() => return stand_down(&mut standby, &mut serving, "asked to stop").await,
            read = read_some(&mut watching, &mut buf) => match read {
                Ok(n) if n > 0 => received.extend_from_slice(&buf[..n]),
                closed => {
                    watching = None;
                    next_connect = Instant::now() + CONNECT_POLL;
                    gone_since = Some(Instant::now());
                    if let Err(err) = closed {
                        tracing::warn!(%err, "reading the supervisor's socket");
                    }
                    match on_close(says_stopping(&received)) {
                        OnClose::StandBy => {
                            tracing::info!("{STANDS_BY}");
                            notify::status("the supervisor stopped; the spare stands by");
                        }
                        OnClose::TakeOver if serving.is_none() => {
                            match take_over(settings, &mut standby, &mut term, &mut int).await? {
                                Ok(child) => serving = Some(Serving { child, since: Instant::now() }),
                                Err(Outcome::Stopped) => return Ok(Outcome::Stopped),
                                Err(outcome) => {
                                    tracing::error!(?outcome, "the spare's CoreDNS does not answer; DNS waits for localdns.service");
                                    standby.resume();
                                }
                            }
                        }
                        OnClose::TakeOver => {}
                    }
                }
            },
            _ = tokio::time::sleep_until(next_connect), if watching.is_none() => {
                match UnixStream::connect(&socket).await {
                    Ok(stream) => {
                        watching = Some(stream);
                        received.clear();
                        gone_since = None;
                        if let Some(mut s) = serving.take() {
                            if let Err(last) = until_held_beside(settings).await {
                                tracing::warn!(%last, "the supervisor is back, but its CoreDNS's sockets are not beside the spare's after {HAND_BACK_TIMEOUT:?}");
                            }
                            let answered = s.since.elapsed();
                            tracing::info!(?answered, "{HANDS_BACK}");
                            stop_coredns(&mut s.child).await?;
                            // What it served, fallback or not, no longer serves.
                            notify::set_degraded(None);
                            standby.resume();
                        } else {
                            tracing::info!("{CONNECTED}");
                        }
                        // The status names the ready standby again (`localdns.service`'s reads
                        // the same way); one not ready yet says so itself once it is.
                        notify::status(&match standby.ready_pid() {
                            Some(pid) => Keeper::Spare.ready_status(settings, pid),
                            None => "watching the supervisor; its standby CoreDNS is starting".to_string(),
                        });
                    }
                    Err(_) => {
                        next_connect = Instant::now() + CONNECT_POLL;
                        if gone_since.is_some_and(|since| since.elapsed() > hold) {
                            let why = format!("the supervisor has been gone for {hold:?}");
                            return stand_down(&mut standby, &mut serving, &why).await;
                        }
                    }
                }
            }
            status = serving_exited(&mut serving) => {
                let status = status.map_err(SuperviseError::Wait)?;
                tracing::error!(%status, "the spare's CoreDNS exited while it answered; DNS waits for localdns.service");
                serving = None;
                notify::set_degraded(None);
                standby.resume();
            }
        }
    }
}

/// The supervisor died: the standby (or, without a ready one, a new CoreDNS) takes the real
/// Corefile — the fallback when CoreDNS cannot serve that ([`fall_back`]); `Ok(Ok)` once both
/// listeners answer.
async fn take_over(
    settings: &Settings,
    standby: &mut StandbySlot,
    term: &mut tokio::signal::unix::Signal,
    int: &mut tokio::signal::unix::Signal,
) -> Result<Result<Child, Outcome>, SuperviseError> {
    let died = std::time::Instant::now();
    let last_words = LastWords::default();
    let mut child = match standby.take_over(settings).await {
        Some(child) => child,
        None => start_coredns(settings, &last_words)?,
    };
    // Its next standby waits until the supervisor is back: the CPU goes to the CoreDNS answering
    // and to the supervisor's restart.
    standby.hold();
    tracing::error!(pid = child.id(), "{TAKES_OVER}");
    notify::status(TAKES_OVER);
    Ok(
        match until_healthy(
            &mut child,
            settings,
            TAKE_OVER_TIMEOUT.min(settings.start_timeout),
            term,
            int,
        )
        .await?
        {
            Ok(_) => {
                tracing::info!(took = ?died.elapsed(), "{ANSWERS}");
                Ok(child)
            }
            Err(outcome) => {
                // A standby whose reload of the Corefile failed keeps its placeholder and is not
                // healthy in time: here that means a Corefile CoreDNS refuses as much as an exit.
                let mut serving = settings.clone();
                let fell_back = match &outcome {
                    Outcome::StartTimedOut { last_error } => {
                        switch_to_fallback(
                            &mut serving,
                            &format!(
                                "the spare's CoreDNS was not healthy with {} in time: {last_error}",
                                settings.corefile.display()
                            ),
                            &last_words,
                        )
                        .await
                    }
                    other => fall_back(&mut serving, other, &last_words).await,
                };
                if !fell_back {
                    return Ok(Err(outcome));
                }
                let mut child = start_coredns(&serving, &last_words)?;
                match until_healthy(&mut child, &serving, serving.start_timeout, term, int).await? {
                    Ok(_) => {
                        tracing::info!(took = ?died.elapsed(), "{ANSWERS}");
                        Ok(child)
                    }
                    Err(outcome) => Err(outcome),
                }
            }
        },
    )
}

/// Waits until each listener has two UDP and two TCP sockets on port 53: the restarted
/// supervisor's CoreDNS beside the spare's. The supervisor's readiness alone does not say so: its
/// start checks may have been answered by the spare's CoreDNS. `Err` names what is short.
async fn until_held_beside(settings: &Settings) -> Result<(), String> {
    let deadline = Instant::now() + HAND_BACK_TIMEOUT;
    loop {
        let last = match node_base::sockets::bound_sockets() {
            Ok(bound) => {
                let short =
                    node_base::sockets::short_of(&bound, &settings.listeners(), super::settings::DNS_PORT, 2);
                if short.is_empty() {
                    return Ok(());
                }
                short.join(", ")
            }
            Err(err) => err,
        };
        if Instant::now() >= deadline {
            return Err(last);
        }
        tokio::time::sleep(HAND_BACK_POLL).await;
    }
}

/// Stops the spare's CoreDNS processes and ends it.
async fn stand_down(
    standby: &mut StandbySlot,
    serving: &mut Option<Serving>,
    why: &str,
) -> Result<Outcome, SuperviseError> {
    tracing::info!("{why}: the spare stands down and exits");
    notify::stopping();
    standby.stop().await;
    if let Some(mut s) = serving.take() {
        stop_coredns(&mut s.child).await?;
    }
    Ok(Outcome::Stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_line_is_a_death_unless_the_supervisor_said_it_stops() {
        assert_eq!(on_close(says_stopping(b"")), OnClose::TakeOver);
        assert_eq!(on_close(says_stopping(b"stop")), OnClose::TakeOver);
        assert_eq!(on_close(says_stopping(alive::STOPPING)), OnClose::StandBy);
        assert_eq!(on_close(says_stopping(b"xxstopping\nyy")), OnClose::StandBy);
    }

    #[test]
    fn the_hold_limit_is_whole_seconds_or_the_default() {
        assert_eq!(hold_from(None), Ok(DEFAULT_HOLD));
        assert_eq!(hold_from(Some(" ")), Ok(DEFAULT_HOLD));
        assert_eq!(hold_from(Some("5")), Ok(Duration::from_secs(5)));
        let err = hold_from(Some("5s")).unwrap_err();
        assert!(err.contains(HOLD_VAR) && err.contains("5s"), "{err}");
    }
}
