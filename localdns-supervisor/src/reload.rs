//! A reload (`systemctl reload localdns`: systemd sends SIGHUP, `Type=notify-reload`): a new
//! CoreDNS on the Corefile as it is now starts beside the serving one (CoreDNS binds with
//! `SO_REUSEPORT`) and, once it holds both listeners itself and answers, the old one stops. The
//! listeners answer throughout, and the supervisor — the unit's main process — stays, so nothing
//! that requires the unit (containerd, kubelet) restarts. A Corefile the new CoreDNS refuses
//! leaves the old one serving, and the status says degraded, with CoreDNS's reason, until a
//! reload or start that works; the Corefile it serves (the one before, kept as
//! [`LAST_GOOD`] in the runtime directory; the fallback without one) is also what a CoreDNS
//! started after a crash serves meanwhile, not the refused one. A supervisor serving the fallback
//! tries the full Corefile again. While the new CoreDNS starts, the watchdog is told every
//! [`WATCHDOG_TICK`] that the old one serves, so a slow start never trips it.

use std::time::Duration;

use tokio::process::Child;
use tokio::signal::unix::Signal;

use super::coredns::{Outcome, SuperviseError, start_coredns, stop_coredns, until_healthy};
use super::last_words::LastWords;
use super::{Settings, notify};

/// The Corefile a refused reload leaves serving, in the runtime directory.
pub const LAST_GOOD: &str = "Corefile.before-reload";
/// How often `WATCHDOG=1` is sent while the new CoreDNS starts.
const WATCHDOG_TICK: Duration = Duration::from_secs(10);

/// How a reload ended.
#[derive(Debug)]
pub enum Reloaded {
    /// The new CoreDNS serves `settings.corefile`; the old one stopped.
    TookOver { took: Duration },
    /// The new CoreDNS did not serve (`why`); the old one goes on serving.
    Refused { why: String },
    /// SIGTERM or SIGINT came during the reload: the new CoreDNS stopped, the old one is the
    /// caller's to stop.
    Stopped(Outcome),
}

/// Tells systemd a reload began (`RELOADING=1` with the monotonic time `Type=notify-reload`
/// asks for).
fn reloading() {
    let mut states = vec![sd_notify::NotifyState::Reloading];
    match sd_notify::NotifyState::monotonic_usec_now() {
        Ok(now) => states.push(now),
        Err(err) => tracing::warn!(%err, "cannot read the monotonic clock for RELOADING=1"),
    }
    if let Err(err) = sd_notify::notify(&states) {
        tracing::warn!(%err, "could not notify systemd");
    }
}

/// Reloads: `child` is the CoreDNS serving `serving.corefile`, `last_words` the reader of its
/// standard error, `last_good` the text of the full Corefile when it last served. On
/// [`Reloaded::TookOver`] they are the new CoreDNS's and `serving` is `settings` (the full
/// Corefile). On [`Reloaded::Refused`] while serving the full Corefile, `serving` moves to the
/// one before ([`keep_the_one_before`]). Ends with `READY=1` and the status line either way but
/// [`Reloaded::Stopped`].
pub async fn reload(
    child: &mut Child,
    serving: &mut Settings,
    last_words: &mut LastWords,
    last_good: &mut Option<String>,
    settings: &Settings,
    term: &mut Signal,
    int: &mut Signal,
) -> Result<Reloaded, SuperviseError> {
    reloading();
    tracing::info!(corefile = %settings.corefile.display(), "reloading: a new CoreDNS beside the serving one");
    notify::status(&format!("reloading {}", settings.corefile.display()));
    // What the new CoreDNS reads, read here too: the text that serves if it takes over.
    let text = std::fs::read_to_string(&settings.corefile).ok();
    let words = LastWords::default();
    let mut candidate = start_coredns(settings, &words)?;
    let outcome = {
        let healthy = until_healthy(&mut candidate, settings, settings.start_timeout, term, int);
        tokio::pin!(healthy);
        let mut tick = tokio::time::interval(WATCHDOG_TICK);
        loop {
            tokio::select! {
                outcome = &mut healthy => break outcome?,
                _ = tick.tick() => notify::watchdog(),
            }
        }
    };
    let reloaded = match outcome {
        Ok(took) => {
            stop_coredns(child).await?;
            *child = candidate;
            *last_words = words;
            *serving = settings.clone();
            *last_good = text;
            notify::set_degraded(None);
            Reloaded::TookOver { took }
        }
        Err(Outcome::Stopped) => return Ok(Reloaded::Stopped(Outcome::Stopped)),
        Err(outcome) => {
            words.settle().await;
            let said = words.take();
            let failure = match &outcome {
                Outcome::CoreDnsExited(status) => {
                    format!("CoreDNS refused {} ({status})", settings.corefile.display())
                }
                Outcome::StartTimedOut { last_error } => {
                    format!(
                        "the CoreDNS for {} was not healthy in time: {last_error}",
                        settings.corefile.display()
                    )
                }
                other => format!("the CoreDNS for {} ended: {other:?}", settings.corefile.display()),
            };
            let failure = if said.is_empty() {
                failure
            } else {
                format!("{failure}: {said}")
            };
            let why = format!(
                "reload refused, still serving {}: {failure}",
                serving.corefile.display()
            );
            tracing::error!("{why}");
            if serving.corefile == settings.corefile {
                keep_the_one_before(serving, settings, last_good.as_deref());
            }
            notify::set_degraded(Some(why.clone()));
            Reloaded::Refused { why }
        }
    };
    let status = match &reloaded {
        Reloaded::TookOver { took } => format!(
            "reloaded {}: CoreDNS healthy on {} and {} after {took:.1?}",
            settings.corefile.display(),
            settings.node_listener,
            settings.cluster_listener
        ),
        _ => format!("CoreDNS serving {}", serving.corefile.display()),
    };
    tracing::info!("{status}");
    notify::ready(&status);
    Ok(reloaded)
}

/// After a refused reload the Corefile file holds what CoreDNS refused, so a CoreDNS started after
/// a crash must not read it: `serving` moves to the text that served before (`last_good`),
/// written to [`LAST_GOOD`] in the runtime directory, or without one (the bridge) to the
/// fallback. The CoreDNS running now is left alone.
fn keep_the_one_before(serving: &mut Settings, settings: &Settings, last_good: Option<&str>) {
    if let (Some(dir), Some(text)) = (&settings.standby_dir, last_good) {
        let path = dir.join(LAST_GOOD);
        match std::fs::write(&path, text) {
            Ok(()) => {
                tracing::info!(corefile = %path.display(), "a CoreDNS started after a crash serves the Corefile before the reload");
                serving.corefile = path;
                return;
            }
            Err(err) => {
                tracing::warn!(%err, path = %path.display(), "cannot keep the Corefile before the reload")
            }
        }
    }
    if let Some(fallback) = &settings.fallback_corefile {
        tracing::info!(corefile = %fallback.display(), "a CoreDNS started after a crash serves the fallback");
        serving.corefile = fallback.clone();
    }
}
