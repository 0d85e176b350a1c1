//! Starting the machine and waiting for it: `machinectl enable/start`, then polling
//! `systemd-run --machine=<m> --pipe --wait /bin/true` (500 ms, up to 30 s), and polling units
//! inside it.

use std::process::Command;
use std::time::{Duration, Instant};

use super::MachineRunner;
use crate::exec::{self, CommandFailed};

/// How long to wait for the machine to answer, and how often to ask.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
pub const READY_POLL: Duration = Duration::from_millis(500);

/// The machine did not come up, or a unit did not become active.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error(transparent)]
    Command(#[from] CommandFailed),
    #[error("{what} did not happen within {waited:?}; last attempt: {last}")]
    Timeout {
        what: String,
        waited: Duration,
        last: String,
    },
}

/// The host unit of machine `m`.
pub fn nspawn_unit(machine: &str) -> String {
    format!("systemd-nspawn@{machine}.service")
}

/// `systemctl is-active systemd-nspawn@<m>.service` on the host.
pub fn is_running(machine: &str) -> Result<bool, CommandFailed> {
    let out = exec::run_unchecked(Command::new("systemctl").args(["is-active", &nspawn_unit(machine)]))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim() == "active")
}

/// `machinectl enable <m>` (start with `machines.target` at boot); idempotent.
pub fn enable(machine: &str) -> Result<(), CommandFailed> {
    exec::run(Command::new("machinectl").args(["enable", machine])).map(drop)
}

/// `machinectl start <m>` unless its unit is already active (a running machine is left alone).
pub fn start(machine: &str) -> Result<bool, CommandFailed> {
    if is_running(machine)? {
        return Ok(false);
    }
    exec::run(Command::new("machinectl").args(["start", machine]))?;
    Ok(true)
}

/// `machinectl disable <m>` (no longer started at boot); idempotent.
pub fn disable(machine: &str) -> Result<(), CommandFailed> {
    exec::run(Command::new("machinectl").args(["disable", machine])).map(drop)
}

/// Stops the machine's unit (systemd waits for the machine to shut down); a machine that does
/// not run is left alone. Returns whether it ran.
pub fn stop(machine: &str) -> Result<bool, CommandFailed> {
    if !is_running(machine)? {
        return Ok(false);
    }
    exec::run(Command::new("systemctl").args(["stop", &nspawn_unit(machine)]))?;
    Ok(true)
}

/// Polls `f` every `every` until it returns `Ok(Some(_))` or `timeout` passes.
pub fn poll<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<Option<T>, String>,
) -> Result<T, MachineError> {
    let started = Instant::now();
    loop {
        let last = match f() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => "not yet".to_owned(),
            Err(e) => e,
        };
        if started.elapsed() >= timeout {
            return Err(MachineError::Timeout {
                what: what.to_owned(),
                waited: timeout,
                last,
            });
        }
        std::thread::sleep(every);
    }
}

/// Waits until a command runs in the machine (`/bin/true` through the runner).
pub fn wait_until_answering(runner: &MachineRunner, timeout: Duration) -> Result<(), MachineError> {
    poll(
        &format!(
            "machine {} answering `systemd-run ... /bin/true`",
            runner.machine()
        ),
        timeout,
        READY_POLL,
        || match runner.run(&["/bin/true"]) {
            Ok(_) => Ok(Some(())),
            Err(e) => Err(e.to_string()),
        },
    )
}

/// Waits until `systemctl is-active <unit>` in the machine says `active`.
pub fn wait_unit_active(
    runner: &MachineRunner,
    unit: &str,
    timeout: Duration,
    every: Duration,
) -> Result<(), MachineError> {
    poll(
        &format!("{unit} active in machine {}", runner.machine()),
        timeout,
        every,
        || match runner.unit_state(unit) {
            Ok(state) if state == "active" => Ok(Some(())),
            Ok(state) => Err(format!("systemctl is-active {unit}: {state}")),
            Err(e) => Err(e.to_string()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_returns_the_first_success_and_times_out_with_the_last_error() {
        let mut n = 0;
        let v = poll("x", Duration::from_secs(5), Duration::from_millis(1), || {
            n += 1;
            Ok((n == 3).then_some(n))
        })
        .unwrap();
        assert_eq!(v, 3);
        let err = poll::<()>(
            "the thing",
            Duration::from_millis(20),
            Duration::from_millis(5),
            || Err("still broken".into()),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("the thing did not happen") && err.contains("still broken"),
            "{err}"
        );
    }
}
