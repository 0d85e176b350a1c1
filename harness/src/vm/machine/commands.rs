//! Guest commands and files of a [`Vm`], through its guest agent.

use std::path::Path;
use std::time::{Duration, Instant};

use super::Vm;
use crate::vm::error::VmError;
use crate::vm::guest;
use crate::vm::qga::GuestOutput;

/// A guest command being prepared: `vm.cmd("...").allow_failure().timeout(d).run()?`.
pub struct GuestCommand<'a> {
    vm: &'a Vm,
    argv: Vec<String>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
    allow_failure: bool,
}

impl GuestCommand<'_> {
    /// Returns the output even when the command exits non-zero.
    pub fn allow_failure(mut self) -> Self {
        self.allow_failure = true;
        self
    }

    /// Overrides the default command deadline (`Deadlines::command`).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Feeds `data` to the command's stdin.
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }

    /// Runs the command: its status, stdout and stderr; fails on a non-zero exit unless
    /// [`GuestCommand::allow_failure`].
    pub fn run(self) -> Result<GuestOutput, VmError> {
        let started = Instant::now();
        let out = self.vm.guest_call("running a guest command", |abort| {
            self.vm
                .agent
                .exec(&self.argv, self.stdin.clone(), self.timeout, abort)
        })?;
        tracing::debug!(vm = self.vm.name(), argv = ?self.argv, status = %out.status,
            took = ?started.elapsed(), "guest command");
        if self.allow_failure {
            Ok(out)
        } else {
            guest::check(self.vm.name(), &self.argv, out)
        }
    }
}

impl Vm {
    /// A guest shell command (`/bin/sh -c`), to configure before `.run()`.
    pub fn cmd(&self, command: &str) -> GuestCommand<'_> {
        self.argv(guest::shell(command))
    }

    /// A guest command given as argv (no shell).
    pub fn argv(&self, argv: Vec<String>) -> GuestCommand<'_> {
        assert!(!argv.is_empty(), "a guest command needs a program");
        GuestCommand {
            vm: self,
            argv,
            stdin: None,
            timeout: self.deadlines.command,
            allow_failure: false,
        }
    }

    /// Runs a shell command and returns its stdout; fails on a non-zero exit with its
    /// status, stdout and stderr.
    pub fn run(&self, command: &str) -> Result<String, VmError> {
        Ok(self.cmd(command).run()?.stdout_text())
    }

    /// Runs a shell command and returns its output whatever its exit status.
    pub fn run_unchecked(&self, command: &str) -> Result<GuestOutput, VmError> {
        self.cmd(command).allow_failure().run()
    }

    /// Copies a host file into the guest (keeping its permission bits; atomic rename).
    pub fn copy_in(&self, host: impl AsRef<Path>, guest: &str) -> Result<(), VmError> {
        self.guest_call("copying a file in", |abort| {
            self.agent.copy_in(host.as_ref(), guest, abort)
        })
    }

    /// Copies a guest file out to the host.
    pub fn copy_out(&self, guest: &str, host: impl AsRef<Path>) -> Result<(), VmError> {
        self.guest_call("copying a file out", |abort| {
            self.agent.copy_out(guest, host.as_ref(), abort)
        })
    }

    /// Writes bytes to a guest file with permission bits `mode`.
    pub fn write_file(&self, guest: &str, data: &[u8], mode: u32) -> Result<(), VmError> {
        self.guest_call("writing a file", |abort| {
            self.agent.write_file(guest, data, mode, abort)
        })
    }

    /// Reads a guest file.
    pub fn read_file(&self, guest: &str) -> Result<Vec<u8>, VmError> {
        self.guest_call("reading a file", |abort| self.agent.read_file(guest, abort))
    }
}
