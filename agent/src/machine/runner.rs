//! The one way to run a command inside the machine: `systemd-run --machine=<m> --pipe --wait`,
//! through [`crate::exec`], so a failure carries the whole command line (the in-machine command
//! included), its exit status, stdout and stderr, exactly like a host command's.

use std::process::{Command, Output};

use crate::exec::{self, CommandFailed};

/// Runs commands in one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineRunner {
    machine: String,
}

impl MachineRunner {
    /// A runner for machine `machine` (`kube1`; `.host` reaches the host's own systemd).
    pub fn new(machine: impl Into<String>) -> MachineRunner {
        MachineRunner {
            machine: machine.into(),
        }
    }

    pub fn machine(&self) -> &str {
        &self.machine
    }

    /// The host command that runs `argv` in the machine as a transient service, waits for it,
    /// pipes its output back and exits with its status.
    pub fn command<S: AsRef<str>>(&self, argv: &[S]) -> Command {
        let mut cmd = Command::new("systemd-run");
        cmd.arg(format!("--machine={}", self.machine))
            .args([
                "--pipe",
                "--wait",
                "--quiet",
                "--collect",
                "--service-type=exec",
                "--",
            ])
            .args(argv.iter().map(AsRef::as_ref));
        cmd
    }

    /// Runs `argv` in the machine; fails unless it exits 0.
    pub fn run<S: AsRef<str>>(&self, argv: &[S]) -> Result<Output, CommandFailed> {
        exec::run(&mut self.command(argv))
    }

    /// Runs `argv` in the machine and returns its output whatever its status.
    pub fn run_unchecked<S: AsRef<str>>(&self, argv: &[S]) -> Result<Output, CommandFailed> {
        exec::run_unchecked(&mut self.command(argv))
    }

    /// Runs `argv` in the machine and returns its stdout.
    pub fn run_stdout<S: AsRef<str>>(&self, argv: &[S]) -> Result<String, CommandFailed> {
        exec::run_stdout(&mut self.command(argv))
    }

    /// `systemctl is-active <unit>` in the machine: the state word (`active`, `inactive`, ...).
    pub fn unit_state(&self, unit: &str) -> Result<String, CommandFailed> {
        let out = self.run_unchecked(&["systemctl", "is-active", unit])?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// [`MachineRunner::unit_state`] of several units with one command (each command in the
    /// machine costs most of a second under emulation): one state per unit, in order; a unit
    /// `systemctl` printed no line for is `unknown`.
    pub fn unit_states(&self, units: &[&str]) -> Result<Vec<String>, CommandFailed> {
        let mut argv = vec!["systemctl", "is-active"];
        argv.extend_from_slice(units);
        let out = self.run_unchecked(&argv)?;
        Ok(states_in_order(
            &String::from_utf8_lossy(&out.stdout),
            units.len(),
        ))
    }

    /// The unit's status line in the machine (its `STATUS=`, `StatusText`), trimmed.
    pub fn status_text(&self, unit: &str) -> Result<String, CommandFailed> {
        Ok(self
            .run_stdout(&["systemctl", "show", unit, "--property=StatusText", "--value"])?
            .trim()
            .to_owned())
    }

    /// The unit's `InvocationID` in the machine (empty when it never ran).
    pub fn invocation_id(&self, unit: &str) -> Result<String, CommandFailed> {
        Ok(self
            .run_stdout(&["systemctl", "show", "--property=InvocationID", "--value", unit])?
            .trim()
            .to_owned())
    }
}

/// `systemctl is-active`'s output for `count` units: one word a line, in the order asked.
fn states_in_order(stdout: &str, count: usize) -> Vec<String> {
    let mut lines = stdout.lines().map(|l| l.trim().to_owned());
    (0..count)
        .map(|_| lines.next().unwrap_or_else(|| "unknown".to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_states_are_one_word_a_line_in_order_and_missing_lines_are_unknown() {
        assert_eq!(
            states_in_order("active\ninactive\nfailed\n", 3),
            ["active", "inactive", "failed"]
        );
        assert_eq!(states_in_order("active\n", 2), ["active", "unknown"]);
        assert_eq!(states_in_order("", 1), ["unknown"]);
    }

    #[test]
    fn the_command_line_names_the_machine_and_the_inner_command() {
        let cmd = MachineRunner::new("kube1").command(&["ctr", "-n", "k8s.io", "images", "ls"]);
        assert_eq!(
            exec::CommandLine(&cmd).to_string(),
            "systemd-run --machine=kube1 --pipe --wait --quiet --collect --service-type=exec -- ctr -n k8s.io images ls"
        );
    }
}
