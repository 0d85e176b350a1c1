//! [`Vm`]: one QEMU VM owned by the caller — its state, crash detection, and cleanup on drop;
//! by concern: [`launch`] (boot cold, resume, the template), [`commands`] (guest commands and
//! files), [`power`] (reboot, reset, power-off, QMP, teardown), [`saving`] (saving a running VM:
//! the image's saved state, a joined node's checkpoint).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::accel::Accel;
use super::console;
use super::deadline::{Deadlines, WaitTimeout};
use super::error::{Crash, TimedOut, VmError};
use super::guest::GuestAgent;
use super::process::{Events, QemuProcess};
use super::rundir::RunDir;
use super::spec::{BootMode, VmSpec};
use super::state::SavedState;

/// Lines of console shown in errors.
const CONSOLE_LINES: usize = 30;

/// A running VM. Dropping it kills QEMU's process group, checks nothing survived, and removes
/// the overlay and run directory (unless kept); after a panic it first saves evidence.
pub struct Vm {
    spec: VmSpec,
    accel: Accel,
    deadlines: Deadlines,
    run: RunDir,
    events: Arc<Events>,
    process: QemuProcess,
    agent: GuestAgent,
    boot_id: String,
    boot_time: Duration,
    mode: BootMode,
    /// The saved state's directory, when resumed.
    state: Option<std::path::PathBuf>,
    /// Set while QEMU is expected to exit (power-off).
    exit_expected: bool,
    torn_down: bool,
}

/// How QEMU is started.
enum Launch<'a> {
    Cold,
    Template {
        disk: &'a Path,
        share: &'a Path,
    },
    /// From a saved state; the identity says whether the guest keeps the saved machine id.
    Resume(&'a SavedState, super::resume::Identity),
}

/// Fails naming `harness images build` when the image's disk, kernel or initrd is missing.
fn check_image(spec: &VmSpec) -> Result<(), VmError> {
    for (what, path) in [
        ("disk", &spec.image.disk),
        ("kernel", &spec.image.kernel),
        ("initrd", &spec.image.initrd),
    ] {
        if !path.is_file() {
            return Err(VmError::Spec(format!(
                "VM {}: the {what} {} does not exist: run `harness images build`",
                spec.name,
                path.display()
            )));
        }
    }
    Ok(())
}

mod commands;
mod launch;
mod power;
mod saving;

pub use commands::GuestCommand;

impl Vm {
    pub fn name(&self) -> &str {
        &self.spec.name
    }
    pub fn spec(&self) -> &VmSpec {
        &self.spec
    }
    pub fn accel(&self) -> Accel {
        self.accel
    }
    pub fn deadlines(&self) -> &Deadlines {
        &self.deadlines
    }
    pub fn run_dir(&self) -> &RunDir {
        &self.run
    }
    pub fn agent(&self) -> &GuestAgent {
        &self.agent
    }
    /// QEMU's pid (the leader of its process group).
    pub fn pid(&self) -> i32 {
        self.process.pid()
    }
    /// The current boot's id (`/proc/sys/kernel/random/boot_id` as the guest announced it).
    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }
    /// How long the first start took: QEMU start to a synchronised guest agent (cold), or to
    /// a resumed guest with its clock and address set (resume).
    pub fn boot_time(&self) -> Duration {
        self.boot_time
    }
    /// Whether the VM was resumed from a saved state or booted cold.
    pub fn boot_mode(&self) -> BootMode {
        self.mode
    }
    /// The saved state's cache directory, when resumed.
    pub fn saved_state(&self) -> Option<&Path> {
        self.state.as_deref()
    }
    /// The last `n` lines of the serial console.
    pub fn console_tail(&self, n: usize) -> Vec<String> {
        console::tail(&self.run.console(), n)
    }
    /// Keep (or not) the overlay and run directory when dropped.
    pub fn keep(&mut self, keep: bool) {
        self.spec.keep = keep;
    }

    /// `Some(Crashed)` if QEMU exited without being asked to.
    fn crashed(&self, doing: &str) -> Option<VmError> {
        let status = self.process.exit_status()?;
        if self.exit_expected {
            return None;
        }
        Some(VmError::Crashed(Box::new(Crash {
            vm: self.name().to_string(),
            status: status.to_string(),
            doing: doing.to_string(),
            dir: self.run.dir().display().to_string(),
            stderr: console::tail_block(&self.run.stderr(), 20),
            console: console::tail_block(&self.run.console(), CONSOLE_LINES),
        })))
    }

    /// Runs a guest agent call; a failure while QEMU is gone becomes [`VmError::Crashed`].
    fn guest_call<T>(
        &self,
        doing: &str,
        call: impl FnOnce(&dyn Fn() -> Option<VmError>) -> Result<T, VmError>,
    ) -> Result<T, VmError> {
        let abort = || self.crashed(doing);
        match call(&abort) {
            Ok(value) => Ok(value),
            Err(err) => {
                // Give the watcher a moment to see an exit that caused this error.
                if self.process.wait_exit(Duration::from_millis(200)).is_some()
                    && let Some(crash) = self.crashed(doing)
                {
                    return Err(crash);
                }
                Err(self.with_console(err))
            }
        }
    }

    fn timeout(&self, source: WaitTimeout) -> VmError {
        self.with_console(source.into())
    }

    /// Fills a timeout's console tail.
    fn with_console(&self, err: VmError) -> VmError {
        match err {
            VmError::Timeout(timed_out) => VmError::Timeout(Box::new(TimedOut {
                source: timed_out.source,
                dir: self.run.dir().display().to_string(),
                console: console::tail_block(&self.run.console(), CONSOLE_LINES),
            })),
            other => other,
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.torn_down {
            let test = crate::vm::evidence::current_test_name();
            crate::vm::evidence::collect(self, &test, "the test panicked");
        }
        if let Err(err) = self.teardown() {
            eprintln!("error: tearing down VM {}: {err}", self.name());
        }
    }
}
