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

    /// The unit's `InvocationID` in the machine (empty when it never ran).
    pub fn invocation_id(&self, unit: &str) -> Result<String, CommandFailed> {
        Ok(self
            .run_stdout(&["systemctl", "show", "--property=InvocationID", "--value", unit])?
            .trim()
            .to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_names_the_machine_and_the_inner_command() {
        let cmd = MachineRunner::new("kube1").command(&["ctr", "-n", "k8s.io", "images", "ls"]);
        assert_eq!(
            exec::CommandLine(&cmd).to_string(),
            "systemd-run --machine=kube1 --pipe --wait --quiet --collect --service-type=exec -- ctr -n k8s.io images ls"
        );
    }
}
