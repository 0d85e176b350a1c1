//! [`Vm`]: one QEMU VM owned by the caller — boot, guest commands, files, reboot, reset,
//! power-off, crash detection, and cleanup on drop.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::accel::Accel;
use super::console;
use super::deadline::{Attempt, Deadlines, WaitTimeout};
use super::error::{Crash, TimedOut, VmError};
use super::guest::{self, GuestAgent};
use super::overlay;
use super::process::{Events, QemuProcess};
use super::qemu;
use super::qga::GuestOutput;
use super::qmp;
use super::ready;
use super::resume::{self, Launched};
use super::rundir::RunDirError;
use super::rundir::{RunDir, VmInfo};
use super::spec::{BootMode, VmSpec};
use super::state::{self, SavedState, StateError};
use crate::cache::Cache;

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
    Template { disk: &'a Path, share: &'a Path },
    Resume(&'a SavedState),
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
    /// Starts a VM and waits until it is ready (guest agent up, address configured): resumed
    /// from the image's saved state ([`super::state`]; built first if missing), or booted cold
    /// (`LAB_COLD_BOOT=1`, [`VmSpec::boot_mode`], or extra kernel arguments) up to
    /// `READY <boot_id>`. A saved state QEMU cannot load is removed and the VM boots cold.
    pub fn boot(spec: VmSpec) -> Result<Vm, VmError> {
        if spec.effective_boot_mode() == BootMode::Cold {
            return Vm::boot_with_cache(spec, None);
        }
        let cache = Cache::open().map_err(|e| VmError::State {
            vm: spec.name.clone(),
            source: Box::new(e.into()),
        })?;
        Vm::boot_with_cache(spec, Some(&cache))
    }

    /// [`Vm::boot`] with the saved states of `cache` (`None`: boot cold).
    pub fn boot_with_cache(spec: VmSpec, cache: Option<&Cache>) -> Result<Vm, VmError> {
        spec.validate().map_err(VmError::Spec)?;
        check_image(&spec)?;
        let accel = match spec.accel {
            Some(accel) => accel,
            None => Accel::from_env()?,
        };
        let deadlines = Deadlines::from_env(accel).map_err(VmError::Spec)?;
        let run = RunDir::new(&spec.lab, &spec.name);
        if let Some(pid) = run.running_pid() {
            return Err(RunDirError::AlreadyRunning {
                lab: spec.lab.clone(),
                name: spec.name.clone(),
                pid,
                dir: run.dir().to_path_buf(),
            }
            .into());
        }
        if let Some(cache) = cache.filter(|_| spec.effective_boot_mode() == BootMode::Resume) {
            let state_err = |source: StateError| VmError::State {
                vm: spec.name.clone(),
                source: Box::new(source),
            };
            let saved = state::ensure(cache, &spec, accel).map_err(state_err)?;
            match Vm::launch(spec.clone(), accel, deadlines, Launch::Resume(&saved)) {
                Ok(vm) => return Ok(vm),
                Err(Launched::Failed(err)) => return Err(err),
                Err(Launched::NotLoaded(err)) => {
                    eprintln!(
                        "==> warning: VM {}: QEMU could not load the saved state {}; removing it and \
                         booting cold.\n{err}",
                        spec.name,
                        saved.dir.display()
                    );
                    state::invalidate(cache, &saved.dir).map_err(state_err)?;
                }
            }
        }
        Vm::launch(spec, accel, deadlines, Launch::Cold).map_err(Launched::into_error)
    }

    /// Boots the VM a saved state is taken from (see [`super::state`]): disk `disk`, an empty
    /// 9p share `share`, the template's network; waits for `READY`.
    pub(crate) fn boot_template(spec: VmSpec, disk: &Path, share: &Path) -> Result<Vm, VmError> {
        let accel = spec.accel.expect("the template's accelerator is set");
        let deadlines = Deadlines::from_env(accel).map_err(VmError::Spec)?;
        Vm::launch(spec, accel, deadlines, Launch::Template { disk, share }).map_err(Launched::into_error)
    }

    fn launch(spec: VmSpec, accel: Accel, deadlines: Deadlines, launch: Launch) -> Result<Vm, Launched> {
        let started = Instant::now();
        let run = RunDir::new(&spec.lab, &spec.name);
        run.prepare(&spec.lab, &spec.name)
            .map_err(|e| Launched::Failed(e.into()))?;
        let (process, events) = match Vm::start(&spec, &run, accel, &launch) {
            Ok(started) => started,
            Err(err) => {
                // Nothing runs yet: leave nothing behind.
                let _ = run.remove();
                return Err(Launched::Failed(err));
            }
        };
        let agent = GuestAgent::for_run_dir(&spec.name, &run, deadlines);
        let mut vm = Vm {
            spec,
            accel,
            deadlines,
            run,
            events,
            process,
            agent,
            boot_id: String::new(),
            boot_time: Duration::ZERO,
            mode: match launch {
                Launch::Resume(_) => BootMode::Resume,
                _ => BootMode::Cold,
            },
            state: match launch {
                Launch::Resume(saved) => Some(saved.dir.clone()),
                _ => None,
            },
            exit_expected: false,
            torn_down: false,
        };
        ready::watch(vm.run.ready(), Arc::clone(&vm.events), &vm.spec.name).map_err(|source| {
            Launched::Failed(VmError::Io {
                vm: vm.spec.name.clone(),
                what: "starting the readiness reader".into(),
                source,
            })
        })?;
        let result = match launch {
            Launch::Resume(_) => vm.finish_resume(),
            _ => vm
                .wait_for_boot(0, "", "booting", vm.deadlines.boot)
                .map_err(Launched::Failed),
        };
        if let Err(err) = result {
            if let Launched::Failed(_) = err {
                let test = crate::evidence::current_test_name();
                crate::evidence::collect(&vm, &test, "the VM did not boot");
            }
            return Err(err);
        }
        vm.boot_time = started.elapsed();
        eprintln!(
            "==> VM {} {} in {:.1}s ({}, boot id {})",
            vm.name(),
            match vm.mode {
                BootMode::Cold => "booted",
                BootMode::Resume => "resumed",
            },
            vm.boot_time.as_secs_f64(),
            vm.accel,
            vm.boot_id
        );
        Ok(vm)
    }

    /// Creates the overlay, writes `vm.json` and starts QEMU.
    fn start(
        spec: &VmSpec,
        run: &RunDir,
        accel: Accel,
        launch: &Launch,
    ) -> Result<(QemuProcess, Arc<Events>), VmError> {
        let overlay_err = |source| VmError::Overlay {
            vm: spec.name.clone(),
            source,
        };
        let io_err = |what: String| {
            let vm = spec.name.clone();
            move |source| VmError::Io { vm, what, source }
        };
        let args = match launch {
            Launch::Cold => {
                overlay::create(&spec.image.disk, run.overlay()).map_err(overlay_err)?;
                qemu::args(spec, run, accel)
            }
            Launch::Template { disk, share } => qemu::template_args(spec, run, accel, disk, share),
            Launch::Resume(saved) => {
                overlay::create(&saved.disk(), run.overlay()).map_err(overlay_err)?;
                let share = match &spec.share {
                    Some(share) => share.clone(),
                    None => {
                        let empty = run.dir().join("share");
                        std::fs::create_dir_all(&empty)
                            .map_err(io_err(format!("creating {}", empty.display())))?;
                        empty
                    }
                };
                // The console log starts with the saved boot's, so it shows how the guest came up.
                let mut console = std::fs::read(saved.console()).unwrap_or_default();
                console.extend_from_slice(
                    format!(
                        "\n=== {}: resumed from saved state {} (the lines above are its boot) ===\n",
                        spec.name, saved.key
                    )
                    .as_bytes(),
                );
                std::fs::write(run.console(), console)
                    .map_err(io_err(format!("writing {}", run.console().display())))?;
                let incoming = saved.incoming_uri().map_err(|source| VmError::State {
                    vm: spec.name.clone(),
                    source: Box::new(source),
                })?;
                qemu::resume_args(spec, run, accel, &share, &incoming)
            }
        };
        let append = qemu::kernel_append(spec);
        run.write_info(&VmInfo {
            lab: spec.lab.clone(),
            name: spec.name.clone(),
            accel: accel.to_string(),
            overlay: run.overlay().to_path_buf(),
            disk: spec.image.disk.clone(),
            kernel: spec.image.kernel.clone(),
            initrd: spec.image.initrd.clone(),
            netns: spec.netns.clone(),
            append,
            boot_mode: Some(match launch {
                Launch::Resume(_) => BootMode::Resume,
                _ => BootMode::Cold,
            }),
            saved_state: match launch {
                Launch::Resume(saved) => Some(saved.dir.clone()),
                _ => None,
            },
        })?;
        let mut cmd = Command::new(qemu::QEMU);
        cmd.args(args);
        let command = agent::exec::CommandLine(&cmd).to_string();
        tracing::info!(vm = %spec.name, %accel, %command, "starting QEMU");
        let events = Arc::new(Events::default());
        let process = QemuProcess::spawn(cmd, spec.netns.as_deref(), &run.stderr(), Arc::clone(&events))
            .map_err(|source| VmError::Start {
                vm: spec.name.clone(),
                command,
                source,
            })?;
        Ok((process, events))
    }

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
                    vm: self.name().to_string(),
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
        super::deadline::wait_until(self.name(), timeout, what, || {
            if let Some(err) = self.crashed(&format!("waiting for {what}")) {
                return super::deadline::Attempt::Abort(err);
            }
            match attempt() {
                Ok(value) => super::deadline::Attempt::Ready(value),
                Err(err) => super::deadline::Attempt::Retry(err.to_string()),
            }
        })
        .map_err(|e| self.with_console(e))
    }

    /// Stops QEMU (SIGKILL to its process group), checks that nothing survived, and removes the
    /// overlay and run directory unless kept. Dropping the VM does the same, printing errors.
    pub fn shutdown(mut self) -> Result<(), VmError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), VmError> {
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

    /// After `-incoming`: waits for QEMU to load the state, continues the guest, reaches its
    /// agent and runs [`resume::setup_argv`] (clock, MAC, address, share); records the boot id.
    fn finish_resume(&mut self) -> Result<(), Launched> {
        let started = Instant::now();
        let doing = "loading the saved state";
        let loaded = super::deadline::wait_until(
            self.name(),
            self.deadlines.boot,
            "QEMU to load the saved state",
            || {
                if let Some(err) = self.crashed(doing) {
                    return Attempt::Abort(err);
                }
                match qmp::execute(&self.run.qmp(), &resume::QueryStatus {}, self.deadlines.agent) {
                    Ok(status) if status["status"] != "inmigrate" => Attempt::Ready(status),
                    Ok(status) => Attempt::Retry(format!("QEMU status {}", status["status"])),
                    Err(err) => Attempt::Retry(err.to_string()),
                }
            },
        );
        let status = match loaded {
            Ok(status) => status,
            // QEMU exits when it cannot load a state; one that loads for minutes is as unusable.
            Err(err @ (VmError::Crashed(_) | VmError::Timeout(_))) => {
                return Err(Launched::NotLoaded(self.with_console(err)));
            }
            Err(err) => return Err(Launched::Failed(err)),
        };
        let loaded_after = started.elapsed();
        if status["running"] != true {
            self.qmp(&qmp::qmp::cont {}).map_err(Launched::Failed)?;
        }
        let out = self
            .argv(resume::setup_argv(&self.spec))
            .run()
            .map_err(Launched::Failed)?;
        let stdout = out.stdout_text();
        self.boot_id = resume::boot_id_of(&stdout).ok_or_else(|| {
            Launched::Failed(VmError::Io {
                vm: self.name().to_string(),
                what: "finishing the resume".into(),
                source: std::io::Error::other(format!("no boot id in the setup's output: {stdout:?}")),
            })
        })?;
        self.sync_clock().map_err(Launched::Failed)?;
        tracing::info!(vm = self.name(), loaded = ?loaded_after, took = ?started.elapsed(), "resumed");
        Ok(())
    }

    /// Sets the guest's clock from the host's with `guest-set-time` (no process is started,
    /// so it lands within milliseconds) and checks it with `guest-get-time`.
    fn sync_clock(&self) -> Result<(), VmError> {
        const TOLERANCE: i64 = 500_000_000;
        let host_ns = || {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            i64::try_from(now.unwrap_or_default().as_nanos()).unwrap_or(i64::MAX)
        };
        let agent_err = |source| VmError::Agent {
            vm: self.name().to_string(),
            source: Box::new(source),
        };
        let mut session = self
            .agent
            .session(&|| self.crashed("setting the guest's clock"))?;
        let mut skew = 0;
        for _ in 0..3 {
            // The guest has no `hwclock`: the agent reports that after setting the clock.
            let set = session.set_time(host_ns());
            let before = host_ns();
            let guest = session.get_time().map_err(agent_err)?;
            let after = host_ns();
            skew = guest - (before / 2 + after / 2);
            if skew.abs() <= TOLERANCE.max((after - before) / 2) {
                return Ok(());
            }
            tracing::debug!(vm = self.name(), skew, ?set, "guest clock not set yet");
        }
        Err(VmError::Io {
            vm: self.name().to_string(),
            what: "setting the guest's clock with guest-set-time".into(),
            source: std::io::Error::other(format!("the guest is still {:.3}s off", skew as f64 / 1e9)),
        })
    }

    /// Pauses the guest and saves its state to the migration `uri` (e.g. `exec:zstd -c > f`),
    /// then quits QEMU. Used to take a saved state ([`super::state`]).
    pub(crate) fn save(&mut self, uri: &str) -> Result<(), VmError> {
        self.qmp(&qmp::qmp::stop {})?;
        self.qmp(&resume::migrate(uri))?;
        super::deadline::wait_until(
            self.name(),
            self.deadlines.boot,
            "the migration to finish",
            || {
                if let Some(err) = self.crashed("saving the guest state") {
                    return Attempt::Abort(err);
                }
                match qmp::execute(&self.run.qmp(), &resume::QueryMigrate {}, self.deadlines.agent) {
                    Ok(info) if info["status"] == "completed" => Attempt::Ready(()),
                    Ok(info) if info["status"] == "failed" || info["status"] == "cancelled" => {
                        Attempt::Abort(VmError::Io {
                            vm: self.name().to_string(),
                            what: format!("saving the guest state to {uri}"),
                            source: std::io::Error::other(format!("migration {info}")),
                        })
                    }
                    Ok(info) => Attempt::Retry(format!("migration status {}", info["status"])),
                    Err(err) => Attempt::Retry(err.to_string()),
                }
            },
        )
        .map_err(|e| self.with_console(e))?;
        self.exit_expected = true;
        let _ = qmp::execute(&self.run.qmp(), &qmp::qmp::quit {}, self.deadlines.agent);
        self.process.wait_exit(self.deadlines.power_off).ok_or_else(|| {
            self.timeout(WaitTimeout {
                vm: self.name().to_string(),
                what: "QEMU to quit after saving".into(),
                waited: self.deadlines.power_off,
                last_failure: "QEMU is still running".into(),
            })
        })?;
        Ok(())
    }

    /// Waits for a `READY` line after index `before` whose boot id differs from `old`, then for
    /// the guest agent; records the new boot id.
    fn wait_for_boot(
        &mut self,
        before: usize,
        old: &str,
        doing: &str,
        timeout: Duration,
    ) -> Result<(), VmError> {
        let started = Instant::now();
        let is_new = |s: &super::process::EventState| s.ready.iter().skip(before).any(|id| id != old);
        let state = self
            .events
            .wait_for(started + timeout, |s| s.exit.is_some() || is_new(s));
        if let Some(err) = self.crashed(doing) {
            return Err(err);
        }
        let Some(id) = state.ready.iter().skip(before).find(|id| *id != old) else {
            let seen = if state.ready.len() > before {
                format!("only the old boot id {old} was announced again")
            } else {
                format!("no READY line on {} since", self.run.ready().display())
            };
            return Err(self.timeout(WaitTimeout {
                vm: self.name().to_string(),
                what: format!("READY <boot_id> while {doing}"),
                waited: started.elapsed(),
                last_failure: seen,
            }));
        };
        self.boot_id = id.clone();
        let remaining = timeout
            .saturating_sub(started.elapsed())
            .max(self.deadlines.agent);
        self.guest_call(doing, |abort| {
            self.agent.session_within(remaining, abort).map(drop)
        })?;
        tracing::info!(vm = self.name(), boot_id = %self.boot_id, took = ?started.elapsed(), "{doing}: ready");
        Ok(())
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.torn_down {
            let test = crate::evidence::current_test_name();
            crate::evidence::collect(self, &test, "the test panicked");
        }
        if let Err(err) = self.teardown() {
            eprintln!("error: tearing down VM {}: {err}", self.name());
        }
    }
}
