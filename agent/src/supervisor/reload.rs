//! A reload (`systemctl reload localdns`: systemd sends SIGHUP, `Type=notify-reload`): a new
//! CoreDNS on the Corefile as it is now starts beside the serving one (CoreDNS binds with
//! `SO_REUSEPORT`) and, once it holds both listeners itself and answers, the old one stops. The
//! listeners answer throughout, and the supervisor — the unit's main process — stays, so nothing
//! that requires the unit (containerd, kubelet) restarts. A Corefile the new CoreDNS refuses
//! leaves the old one serving, and the status says degraded, with CoreDNS's reason, until a
//! reload or start that works. A supervisor serving the fallback tries the full Corefile again.

use std::time::Duration;

use tokio::process::Child;
use tokio::signal::unix::Signal;

use super::last_words::LastWords;
use super::run::{Outcome, SuperviseError, start_coredns, stop_coredns, until_healthy};
use super::{Settings, notify};

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
/// standard error. On [`Reloaded::TookOver`] they are the new CoreDNS's and `serving` is
/// `settings` (the full Corefile). Ends with `READY=1` and the status line either way but
/// [`Reloaded::Stopped`].
pub async fn reload(
    child: &mut Child,
    serving: &mut Settings,
    last_words: &mut LastWords,
    settings: &Settings,
    term: &mut Signal,
    int: &mut Signal,
) -> Result<Reloaded, SuperviseError> {
    reloading();
    tracing::info!(corefile = %settings.corefile.display(), "reloading: a new CoreDNS beside the serving one");
    notify::status(&format!("reloading {}", settings.corefile.display()));
    let words = LastWords::default();
    let mut candidate = start_coredns(settings, &words)?;
    let outcome = until_healthy(&mut candidate, settings, settings.start_timeout, term, int).await?;
    let reloaded = match outcome {
        Ok(took) => {
            stop_coredns(child).await?;
            *child = candidate;
            *last_words = words;
            *serving = settings.clone();
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
