//! Readiness checks without sleeps of a fixed length: poll a check until it passes, a
//! deadline passes, or a process the check depends on exits.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::error::ControlPlaneError;
use super::process::Component;
use crate::lab::netns;
use crate::wait::{Attempt, WaitTimeout, wait_until};

/// Log lines shown with a failure.
const TAIL_LINES: usize = 30;

/// How a component's wait ended without its check passing.
enum Waited {
    /// It (or one it depends on) exited.
    Exited(ControlPlaneError),
    TimedOut(WaitTimeout),
}

impl From<WaitTimeout> for Waited {
    fn from(timeout: WaitTimeout) -> Self {
        Waited::TimedOut(timeout)
    }
}

/// Polls `check` ([`crate::wait::wait_until`]) until it returns `Ok`, failing when `component`
/// (or any of `running`) exits or `timeout` passes; the error names the check, its last failure
/// and the log tail.
pub fn wait_for<T>(
    component: &Component,
    running: &[&Component],
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, ControlPlaneError> {
    let started = Instant::now();
    let waited = wait_until(component.name(), timeout, what, || {
        for c in std::iter::once(component).chain(running.iter().copied()) {
            if let Some(status) = c.exited() {
                return Attempt::Abort(Waited::Exited(ControlPlaneError::Exited {
                    component: c.name(),
                    status: status.to_string(),
                    log: c.log().to_path_buf(),
                    tail: c.log_tail(TAIL_LINES),
                }));
            }
        }
        match check() {
            Ok(value) => Attempt::Ready(value),
            Err(message) => Attempt::Retry(message),
        }
    });
    match waited {
        Ok(value) => {
            tracing::info!(component = component.name(), check = what, took = ?started.elapsed(), "ready");
            Ok(value)
        }
        Err(Waited::Exited(err)) => Err(err),
        Err(Waited::TimedOut(timed_out)) => Err(ControlPlaneError::NotReady {
            component: component.name(),
            check: what.to_string(),
            timeout,
            last: timed_out.last_failure,
            log: format!(
                "the end of {}:\n{}",
                component.log().display(),
                component.log_tail(TAIL_LINES)
            ),
        }),
    }
}

/// `GET http://<addr><path>` from inside namespace `ns` (HTTP/1.0, one second limits);
/// returns the status code and the body.
pub fn http_get_in(ns: &str, addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let response = netns::in_netns(ns, move || {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.write_all(request.as_bytes())?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    })
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("GET http://{addr}{path}: {e}"))?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("GET http://{addr}{path}: not an HTTP response: {head:?}"))?;
    Ok((status, body.to_string()))
}
