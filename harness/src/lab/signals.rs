//! Ctrl-C, SIGTERM and SIGHUP while a lab runs.
//!
//! Once a lab starts, a thread watches these signals. If someone waits in
//! [`wait_for_stop`] (`harness lab up`), it is woken and tears down normally.
//! Otherwise (a test interrupted by Ctrl-C or killed by nextest's timeout with
//! SIGTERM) every live lab of this process is destroyed — processes in its
//! namespace killed, namespace deleted, run directory removed — and the
//! process exits with 128 + the signal number, as it would have by default.
//! A SIGKILL leaves the lab for the sweep of the next lab to start.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, MutexGuard, Once};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::owner;

static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());
static WAITER: Mutex<Option<Sender<i32>>> = Mutex::new(None);
static INSTALL: Once = Once::new();

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn install() {
    INSTALL.call_once(|| {
        let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP]) {
            Ok(signals) => signals,
            Err(err) => {
                tracing::warn!(%err, "cannot watch signals; an interrupted lab is left for the next sweep");
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("lab-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    if let Some(waiter) = lock(&WAITER).as_ref()
                        && waiter.send(signal).is_ok()
                    {
                        continue;
                    }
                    destroy_live_labs(signal);
                    std::process::exit(128 + signal);
                }
            });
        if let Err(err) = spawned {
            tracing::warn!(%err, "cannot start the signal thread");
        }
    });
}

fn destroy_live_labs(signal: i32) {
    let live = std::mem::take(&mut *lock(&LIVE));
    for name in live {
        eprintln!("signal {signal}: tearing down {name}");
        for problem in owner::destroy(&name) {
            eprintln!("  left behind: {problem}");
        }
    }
}

/// Marks a lab as live in this process (its teardown then runs on a signal).
pub fn register(name: &str) {
    install();
    lock(&LIVE).push(name.to_string());
}

/// Forgets a lab that was torn down.
pub fn unregister(name: &str) {
    lock(&LIVE).retain(|n| n != name);
}

/// A subscription to stop signals; while it lives, signals wake it instead of
/// destroying the labs.
pub struct StopSignals(Receiver<i32>);

/// Routes SIGINT, SIGTERM and SIGHUP to the returned subscription.
pub fn subscribe() -> StopSignals {
    install();
    let (tx, rx) = channel();
    *lock(&WAITER) = Some(tx);
    StopSignals(rx)
}

impl StopSignals {
    /// Blocks until a stop signal arrives and returns its number.
    pub fn wait(&self) -> i32 {
        self.0.recv().unwrap_or(SIGTERM)
    }

    /// The stop signal that arrived since the last call, if any (does not block).
    pub fn arrived(&self) -> Option<i32> {
        self.0.try_recv().ok()
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        *lock(&WAITER) = None;
    }
}

/// Blocks until SIGINT, SIGTERM or SIGHUP; returns its number.
pub fn wait_for_stop() -> i32 {
    subscribe().wait()
}
