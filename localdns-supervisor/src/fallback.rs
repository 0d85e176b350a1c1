//! The fallback: when CoreDNS cannot serve the Corefile (it exits before it is healthy: at the
//! start, or three times in a row after a crash), the supervisor serves the fallback Corefile instead
//! (`LOCALDNS_FALLBACK_COREFILE`, both listeners forwarding) so that names keep resolving, and
//! says it is degraded, and why, in every status line until it ends. The full Corefile is tried
//! again at the next start of the unit (the agent restarts it whenever it writes a new Corefile).
//! A CoreDNS that is only slow to become healthy (the start timeout; a loaded or emulated CPU), or
//! killed by a signal (SIGKILL, the OOM killer at the slice's limit), is not taken for a refused
//! Corefile: the supervisor ends as before and systemd starts the unit again with the full
//! Corefile.

use super::coredns::Outcome;
use super::last_words::LastWords;
use super::{Settings, notify};

/// When `outcome` is CoreDNS exiting before it served `serving.corefile` and there is a fallback
/// not served yet: switches `serving` to the fallback, logs and sets the degraded status (quoting
/// CoreDNS's last words, read to their end first), and returns true. Otherwise (stopped on purpose, not healthy in time, no fallback, the fallback
/// itself failing) changes nothing.
pub async fn fall_back(serving: &mut Settings, outcome: &Outcome, last_words: &LastWords) -> bool {
    let failure = match outcome {
        // An exit with a code is CoreDNS's own (a Corefile it refuses exits 1); a death by a
        // signal (SIGKILL, the OOM killer at the slice's limit) says nothing about the Corefile.
        Outcome::CoreDnsExited(status) if status.code().is_some() => {
            format!("CoreDNS refused {} ({status})", serving.corefile.display())
        }
        Outcome::CoreDnsExited(_)
        | Outcome::StartTimedOut { .. }
        | Outcome::Stopped
        | Outcome::GaveUp { .. } => {
            return false;
        }
    };
    switch_to_fallback(serving, &failure, last_words).await
}

/// Switches `serving` to the fallback because of `failure` (with CoreDNS's last words, if it
/// said any), logs it and sets the degraded status; false, changing nothing, when there is no
/// fallback or it serves already.
pub async fn switch_to_fallback(serving: &mut Settings, failure: &str, last_words: &LastWords) -> bool {
    let Some(fallback) = serving.fallback_corefile.clone() else {
        return false;
    };
    if serving.corefile == fallback {
        return false;
    }
    last_words.settle().await;
    let said = last_words.take();
    let why = if said.is_empty() {
        format!("serving the fallback Corefile: {failure}")
    } else {
        format!("serving the fallback Corefile: {failure}: {said}")
    };
    tracing::error!(fallback = %fallback.display(), "{why}");
    notify::set_degraded(Some(why));
    serving.corefile = fallback;
    true
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::path::PathBuf;
    use std::process::ExitStatus;

    use super::*;

    fn settings(fallback: Option<&str>) -> Settings {
        let vars = |name: &str| {
            match name {
                "LOCALDNS_NODE_LISTENER" => Some("169.254.10.10"),
                "LOCALDNS_CLUSTER_LISTENER" => Some("169.254.10.11"),
                "LOCALDNS_COREFILE" => Some("/etc/Corefile"),
                "LOCALDNS_COREDNS" => Some("/usr/bin/coredns"),
                "LOCALDNS_HEALTH_NAME" => Some("health.example"),
                "LOCALDNS_READY_PORT" => Some("8181"),
                "LOCALDNS_FALLBACK_COREFILE" => fallback,
                _ => None,
            }
            .map(str::to_owned)
        };
        Settings::from_vars(vars, None).unwrap()
    }

    // The lock only keeps other tests off the process-wide flag; nothing else takes it.
    #[allow(clippy::await_holding_lock)]
    #[tokio::test]
    async fn a_refused_corefile_switches_to_the_fallback_once_and_says_why() {
        let _held = notify::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut serving = settings(Some("/etc/Corefile.fallback"));
        let words = LastWords::default();
        let exited = Outcome::CoreDnsExited(ExitStatus::from_raw(1 << 8));
        assert!(!fall_back(&mut serving, &Outcome::Stopped, &words).await);
        let slow = Outcome::StartTimedOut {
            last_error: "GET /ready: no answer".into(),
        };
        assert!(!fall_back(&mut serving, &slow, &words).await);
        // Killed by a signal (the OOM killer) is not a refusal.
        let killed = Outcome::CoreDnsExited(ExitStatus::from_raw(9));
        assert!(!fall_back(&mut serving, &killed, &words).await);
        assert!(fall_back(&mut serving, &exited, &words).await);
        assert_eq!(serving.corefile, PathBuf::from("/etc/Corefile.fallback"));
        let why = notify::degraded().unwrap();
        assert!(
            why.contains("CoreDNS refused /etc/Corefile (exit status: 1)"),
            "{why}"
        );
        // The fallback failing too is not answered by itself.
        assert!(!fall_back(&mut serving, &exited, &words).await);
        notify::set_degraded(None);

        let mut without = settings(None);
        assert!(!fall_back(&mut without, &exited, &words).await);
        assert_eq!(without.corefile, PathBuf::from("/etc/Corefile"));
    }
}
