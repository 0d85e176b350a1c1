//! Waiting with a deadline: retry an attempt until it is ready, aborts, or the time runs out —
//! one helper for the VM's, the control plane's and the checkpoint's waits, whose timeout error
//! names what was awaited, on what, for how long, and the last failure.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// A wait that ran out of time.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {waited:.1?} waiting for {what} on {subject}; last failure: {last_failure}")]
pub struct WaitTimeout {
    /// What was waited on: `VM localdns`, `kube-apiserver`, `Node localdns`.
    pub subject: String,
    pub what: String,
    pub waited: Duration,
    pub last_failure: String,
}

/// What one attempt of [`wait_until`] says.
pub enum Attempt<T, E> {
    /// Done with this value.
    Ready(T),
    /// Not yet, because of this (kept as "last failure").
    Retry(String),
    /// Stop waiting: nothing will change (e.g. QEMU exited).
    Abort(E),
}

/// Retries `attempt` until it is ready, aborts, or `timeout` runs out, sleeping with a small
/// backoff (50 ms up to 1 s) between attempts. The timeout error names what was awaited, on
/// what, for how long, and the last failure.
pub fn wait_until<T, E: From<WaitTimeout>>(
    subject: impl Display,
    timeout: Duration,
    what: impl Display,
    mut attempt: impl FnMut() -> Attempt<T, E>,
) -> Result<T, E> {
    let _waiting = crate::phase_clock::enter(crate::phase_clock::Phase::Waiting);
    let started = Instant::now();
    let mut pause = Duration::from_millis(50);
    let mut last_failure: String;
    loop {
        match attempt() {
            Attempt::Ready(value) => return Ok(value),
            Attempt::Abort(err) => return Err(err),
            Attempt::Retry(why) => last_failure = why,
        }
        let waited = started.elapsed();
        if waited >= timeout {
            return Err(WaitTimeout {
                subject: subject.to_string(),
                what: what.to_string(),
                waited,
                last_failure,
            }
            .into());
        }
        std::thread::sleep(pause.min(timeout - waited));
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// `Attempt::Retry` from any displayable failure.
pub fn retry<T, E>(why: impl Display) -> Attempt<T, E> {
    Attempt::Retry(why.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_error_names_what_on_what_how_long_and_last_failure() {
        let mut n = 0;
        let err = wait_until::<(), WaitTimeout>("VM node1", Duration::from_millis(120), "the agent", || {
            n += 1;
            retry(format!("attempt {n} refused"))
        })
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("the agent") && text.contains("node1"), "{text}");
        assert!(text.contains(&format!("attempt {n} refused")), "{text}");
        assert!(err.waited >= Duration::from_millis(120), "{text}");
    }

    #[test]
    fn abort_stops_at_once_and_ready_returns_the_value() {
        let err = wait_until::<(), WaitTimeout>("vm", Duration::from_secs(60), "x", || {
            Attempt::Abort(WaitTimeout {
                subject: "VM vm".into(),
                what: "gone".into(),
                waited: Duration::ZERO,
                last_failure: "qemu exited".into(),
            })
        })
        .unwrap_err();
        assert_eq!(err.last_failure, "qemu exited");
        let mut tries = 0;
        let value = wait_until::<_, WaitTimeout>("vm", Duration::from_secs(5), "x", || {
            tries += 1;
            if tries < 3 {
                retry("not yet")
            } else {
                Attempt::Ready(tries)
            }
        })
        .unwrap();
        assert_eq!(value, 3);
    }
}
