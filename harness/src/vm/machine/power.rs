//! A running [`Vm`]'s power: reboot, reset, power-off, QMP, waiting on it, teardown.

use std::time::{Duration, Instant};

use super::Vm;
use crate::vm::deadline::WaitTimeout;
use crate::vm::error::VmError;
use crate::vm::guest;
use crate::vm::qmp;

impl Vm {
    /// Reboots from inside (`systemctl reboot`) and waits for `READY` with a new boot id.
    pub fn reboot(&mut self) -> Result<(), VmError> {
        let (before, old) = (self.events.snapshot().ready.len(), self.boot_id.clone());
        let argv = guest::shell("systemctl reboot");
        self.guest_call("asking the guest to reboot", |abort| {
            self.agent.spawn_detached(&argv, abort)
        })?;
        self.wait_for_boot(before, &old, "rebooting from inside", self.deadlines.reboot)
    }

    /// Resets the machine (QMP `system_reset`, like the reset button) and waits for `READY`
    /// with a new boot id.
    pub fn reset(&mut self) -> Result<(), VmError> {
        let (before, old) = (self.events.snapshot().ready.len(), self.boot_id.clone());
        self.qmp(&qmp::qmp::system_reset {})?;
        self.wait_for_boot(before, &old, "resetting (system_reset)", self.deadlines.reboot)
    }

    /// Powers off and waits for QEMU to exit: `systemctl poweroff` over the guest agent, or the
    /// ACPI power button (QMP `system_powerdown`) when the agent does not answer; the button is
    /// also pressed if the guest is still up after half the deadline. (A button press right
    /// after boot can be lost while logind is not yet watching the button, so it is not first.)
    pub fn power_off(&mut self) -> Result<std::process::ExitStatus, VmError> {
        if let Some(err) = self.crashed("powering off") {
            return Err(err);
        }
        self.exit_expected = true;
        let asked = self
            .agent
            .session_within(self.deadlines.evidence, &|| None)
            .and_then(|mut session| {
                session
                    .spawn(&guest::shell("systemctl poweroff"), None, false)
                    .map_err(|e| VmError::Agent {
                        vm: self.name().to_string(),
                        source: Box::new(e),
                    })
            });
        if asked.is_err() {
            self.qmp(&qmp::qmp::system_powerdown {})?;
        }
        if let Some(status) = self.process.wait_exit(self.deadlines.power_off / 2) {
            return Ok(status);
        }
        eprintln!(
            "==> VM {} is still up: pressing the ACPI power button",
            self.name()
        );
        let _ = qmp::execute(
            &self.run.qmp(),
            &qmp::qmp::system_powerdown {},
            self.deadlines.agent,
        );
        self.process
            .wait_exit(self.deadlines.power_off / 2)
            .ok_or_else(|| {
                self.timeout(WaitTimeout {
                    subject: format!("VM {}", self.name()),
                    what: "QEMU to exit after `systemctl poweroff` and system_powerdown".into(),
                    waited: self.deadlines.power_off,
                    last_failure: "QEMU is still running".into(),
                })
            })
    }

    /// Runs a QMP command on this VM's monitor.
    pub fn qmp<C: qapi::Command>(&self, command: &C) -> Result<C::Ok, VmError> {
        if let Some(err) = self.crashed(&format!("sending QMP {}", C::NAME)) {
            return Err(err);
        }
        qmp::execute(&self.run.qmp(), command, self.deadlines.agent).map_err(|source| {
            self.crashed(&format!("sending QMP {}", C::NAME))
                .unwrap_or(VmError::Qmp {
                    vm: self.name().to_string(),
                    source: Box::new(source),
                })
        })
    }

    /// Whether QEMU is still running.
    pub fn is_running(&self) -> bool {
        self.process.exit_status().is_none()
    }

    /// Retries `attempt` until it succeeds or `timeout` passes; fails at once if QEMU exits.
    /// The error names what was awaited, this VM, how long, and the last failure.
    pub fn wait_until<T, E: std::fmt::Display>(
        &self,
        timeout: Duration,
        what: &str,
        mut attempt: impl FnMut() -> Result<T, E>,
    ) -> Result<T, VmError> {
        crate::vm::deadline::wait_until(self.name(), timeout, what, || {
            if let Some(err) = self.crashed(&format!("waiting for {what}")) {
                return crate::vm::deadline::Attempt::Abort(err);
            }
            match attempt() {
                Ok(value) => crate::vm::deadline::Attempt::Ready(value),
                Err(err) => crate::vm::deadline::Attempt::Retry(err.to_string()),
            }
        })
        .map_err(|e| self.with_console(e))
    }

    /// Stops QEMU (SIGKILL to its process group), checks that nothing survived, and removes the
    /// overlay and run directory unless kept. Dropping the VM does the same, printing errors.
    pub fn shutdown(mut self) -> Result<(), VmError> {
        self.teardown()
    }

    pub(super) fn teardown(&mut self) -> Result<(), VmError> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        self.process.kill(Duration::from_secs(30));
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.process.group_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.process.group_alive() {
            return Err(VmError::Survivors {
                vm: self.name().to_string(),
                pgid: self.process.pid(),
            });
        }
        if self.spec.keep || std::env::var("LAB_KEEP").is_ok_and(|v| v == "1") {
            eprintln!(
                "==> kept VM {}: run directory {}, overlay {}",
                self.name(),
                self.run.dir().display(),
                self.run.overlay().display()
            );
            return Ok(());
        }
        self.run.remove()?;
        Ok(())
    }
}
