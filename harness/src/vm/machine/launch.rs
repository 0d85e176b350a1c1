//! Starting a [`Vm`]: cold boot, resume from a saved state (the image's, or a checkpoint's),
//! the template a saved state is taken from; waiting for `READY` and the guest agent.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Launch, Vm, check_image};
use crate::cache::Cache;
use crate::vm::accel::Accel;
use crate::vm::deadline::{Attempt, Deadlines, WaitTimeout};
use crate::vm::error::VmError;
use crate::vm::guest::GuestAgent;
use crate::vm::overlay;
use crate::vm::process::{Events, QemuProcess};
use crate::vm::qemu;
use crate::vm::qmp;
use crate::vm::ready;
use crate::vm::resume::{self, Identity, Launched};
use crate::vm::rundir::{RunDir, RunDirError, VmInfo};
use crate::vm::spec::{BootMode, VmSpec};
use crate::vm::state::{self, SavedState, StateError};

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
            let saved = Vm::ensure_saved_state(cache, &spec, accel).map_err(state_err)?;
            match Vm::launch(
                spec.clone(),
                accel,
                deadlines,
                Launch::Resume(&saved, Identity::New),
            ) {
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

    /// Starts a VM from a given saved state (a joined node's checkpoint, [`crate::checkpoint`])
    /// on its own overlay, with no fallback: a state QEMU cannot load is an error
    /// ([`VmError::State`]) for the caller to drop the state and do without it.
    pub fn resume_from(spec: VmSpec, saved: &SavedState) -> Result<Vm, VmError> {
        spec.validate().map_err(VmError::Spec)?;
        let accel = match spec.accel {
            Some(accel) => accel,
            None => Accel::from_env()?,
        };
        let deadlines = Deadlines::from_env(accel).map_err(VmError::Spec)?;
        let name = spec.name.clone();
        Vm::launch(spec, accel, deadlines, Launch::Resume(saved, Identity::Saved)).map_err(|launched| {
            match launched {
                Launched::NotLoaded(err) => VmError::State {
                    vm: name,
                    source: Box::new(StateError::Stale {
                        dir: saved.dir.clone(),
                        why: format!("QEMU could not load it: {err}"),
                    }),
                },
                Launched::Failed(err) => err,
            }
        })
    }

    /// Boots the VM a saved state is taken from (see [`super::state`]): disk `disk`, an empty
    /// 9p share `share`, the template's network; waits for `READY`.
    pub(crate) fn boot_template(spec: VmSpec, disk: &Path, share: &Path) -> Result<Vm, VmError> {
        let accel = spec.accel.expect("the template's accelerator is set");
        let deadlines = Deadlines::from_env(accel).map_err(VmError::Spec)?;
        Vm::launch(spec, accel, deadlines, Launch::Template { disk, share }).map_err(Launched::into_error)
    }

    pub(super) fn launch(
        spec: VmSpec,
        accel: Accel,
        deadlines: Deadlines,
        launch: Launch,
    ) -> Result<Vm, Launched> {
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
                Launch::Resume(..) => BootMode::Resume,
                _ => BootMode::Cold,
            },
            state: match launch {
                Launch::Resume(saved, _) => Some(saved.dir.clone()),
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
            Launch::Resume(_, identity) => vm.finish_resume(identity),
            _ => vm
                .wait_for_boot(0, "", "booting", vm.deadlines.boot)
                .map_err(Launched::Failed),
        };
        if let Err(err) = result {
            if let Launched::Failed(_) = err {
                let test = crate::vm::evidence::current_test_name();
                crate::vm::evidence::collect(&vm, &test, "the VM did not boot");
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
    pub(super) fn start(
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
            Launch::Resume(saved, _) => {
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
                Launch::Resume(..) => BootMode::Resume,
                _ => BootMode::Cold,
            }),
            saved_state: match launch {
                Launch::Resume(saved, _) => Some(saved.dir.clone()),
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

    /// After `-incoming`: waits for QEMU to load the state, continues the guest, reaches its
    /// agent and runs [`resume::setup_argv`] (clock, MAC, address, share, machine id); records
    /// the boot id.
    pub(super) fn finish_resume(&mut self, identity: Identity) -> Result<(), Launched> {
        let started = Instant::now();
        let doing = "loading the saved state";
        let loaded = crate::vm::deadline::wait_until(
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
            .argv(resume::setup_argv(&self.spec, identity))
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
    pub(super) fn sync_clock(&self) -> Result<(), VmError> {
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

    /// Waits for a `READY` line after index `before` whose boot id differs from `old`, then for
    /// the guest agent; records the new boot id.
    pub(super) fn wait_for_boot(
        &mut self,
        before: usize,
        old: &str,
        doing: &str,
        timeout: Duration,
    ) -> Result<(), VmError> {
        let started = Instant::now();
        let is_new = |s: &crate::vm::process::EventState| s.ready.iter().skip(before).any(|id| id != old);
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
                subject: format!("VM {}", self.name()),
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
