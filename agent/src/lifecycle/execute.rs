//! Act: the executor runs the planned steps, recording each before it runs — the install stage
//! for `start`, the operation's step for `reboot` and `apply`, the phase in the repave record for
//! `repave` — and keeps the manifest of what it wrote.

use std::path::{Path, PathBuf};

use super::error::LifecycleError;
use super::manifest::{self, Manifest};
use super::observe::{LoadedConfig, Observation};
use super::plan::{Operation, Step};
use super::progress::Progress;
use super::repave_state::{self, RepaveState};
use super::state::{self, FailedOperation, FinishedOperation, InstallState, OperationRecord, Stage};
use super::{Options, reconfigure, repave};
use crate::artifact::{FetchOptions, Fetcher, checksum};
use crate::files::{under, write_atomic};
use crate::goal::HostFacts;
use crate::machine::{MachineRunner, machinectl};
use crate::names::Slot;
use crate::preflight::{self, Severity};
use crate::render::Rendered;
use crate::start::node::{self, Waits};
use crate::start::rootfs::{self, ImageArchive};
use crate::start::{StartError, daemon_unit, host, localdns_restart, plan as node_plan};

/// The running operation.
pub struct Executor<'a> {
    pub op: Operation,
    pub root: PathBuf,
    pub state_path: PathBuf,
    pub repave_path: PathBuf,
    pub observation: Observation,
    pub waits: Waits,
    pub fetcher: Fetcher,
    pub progress: &'a dyn Progress,
    ignore_checks: Vec<String>,
    /// The slot acted on (the active one; a repave's source until it commits).
    pub slot: Slot,
    /// The install state as last written.
    pub state: Option<InstallState>,
    /// The repave record as last written.
    pub repave: Option<RepaveState>,
    /// What the rootfs was populated with, once it was (in this run).
    populated: Option<rootfs::Populated>,
}

impl<'a> Executor<'a> {
    pub fn new(
        op: Operation,
        options: &Options,
        observation: Observation,
        progress: &'a dyn Progress,
    ) -> Executor<'a> {
        Executor {
            op,
            root: options.root.clone(),
            state_path: under(&options.root, Path::new(state::PATH)),
            repave_path: under(&options.root, Path::new(repave_state::PATH)),
            waits: Waits::given_or_detected(options.timeout_scale),
            fetcher: Fetcher::new(FetchOptions::default()),
            progress,
            ignore_checks: options.ignore_checks.clone(),
            slot: observation.slot,
            state: observation.planner.state.clone(),
            repave: observation.planner.repave.clone(),
            observation,
            populated: None,
        }
    }

    /// The config the operation acts with (the planner refuses every operation without one).
    pub fn config(&self) -> &LoadedConfig {
        self.observation
            .config
            .as_ref()
            .expect("the planner only plans steps when a config was observed")
    }

    pub fn line(&self, text: &str) {
        self.progress.line(&format!("{}: {text}", self.op.name()));
    }

    /// Every file of the node for `slot`, from this host's facts now (upstreams re-discovered).
    pub fn render(&self, slot: Slot) -> Result<Rendered, StartError> {
        let config = &self.config().config;
        let facts = HostFacts::gather(Path::new("/"), config.node_name.as_str())?;
        let goal = crate::goal::resolve(config, &facts, slot)?;
        Ok(node_plan::node_files(config, &goal, &facts.host_resolv_conf)?)
    }

    pub fn runner(slot: Slot) -> MachineRunner {
        MachineRunner::new(slot.as_str())
    }

    pub fn save_state(&mut self, state: InstallState) -> Result<(), StartError> {
        state::save(&self.state_path, &state)?;
        self.state = Some(state);
        Ok(())
    }

    /// Records `step` before it runs.
    fn enter(&mut self, step: Step) -> Result<(), LifecycleError> {
        self.line(&format!("step {}", step.name()));
        let sha = self.config().sha256.clone();
        match (self.op, step) {
            (
                Operation::Start,
                Step::PrepareHost | Step::PrepareRootfs | Step::StartNode | Step::InstallDaemon,
            ) => {
                let stage = match step {
                    Step::PrepareHost => Stage::PreparingHost,
                    Step::PrepareRootfs => Stage::PreparingRootfs,
                    Step::StartNode => Stage::StartingNode,
                    _ => Stage::InstallingDaemon,
                };
                let manifest = self
                    .state
                    .as_ref()
                    .map(|s| s.manifest.clone())
                    .unwrap_or_default();
                let mut next = InstallState::new(self.slot, stage, &sha);
                next.manifest = manifest;
                self.save_state(next)?;
            }
            (Operation::Reboot | Operation::Apply, _) => {
                let mut next = self.state.clone().expect("a finished node has a state");
                next.operation = Some(OperationRecord {
                    kind: self.op.name().into(),
                    step: step.name().into(),
                    config_sha256: sha,
                });
                self.save_state(next)?;
            }
            (Operation::Repave { .. }, Step::Repave(phase)) => {
                let record = repave::record_for(self, phase)?;
                repave_state::save(&self.repave_path, &record)?;
                self.repave = Some(record);
            }
            _ => {}
        }
        Ok(())
    }

    /// Runs one step, and says how long it took. A step that fails is recorded as the last
    /// failure (kept until an operation finishes) for `unbounded-agent status`.
    pub fn run_step(&mut self, step: Step) -> Result<(), LifecycleError> {
        let started = std::time::Instant::now();
        if let Err(err) = self.run_step_body(step) {
            self.record_failure(step, &err);
            return Err(err);
        }
        self.line(&format!(
            "step {} done in {:.1}s",
            step.name(),
            started.elapsed().as_secs_f64()
        ));
        Ok(())
    }

    fn run_step_body(&mut self, step: Step) -> Result<(), LifecycleError> {
        self.enter(step)?;
        match step {
            Step::Preflight => self.preflight()?,
            Step::PrepareHost => {
                let rendered = self.render(self.slot)?;
                let changes = host::prepare(&self.root, &rendered)?;
                self.line(&format!(
                    "host prepared (files written: {}, modules loaded: {:?}, sysctls set: {:?})",
                    changes.files.len(),
                    changes.modules_loaded,
                    changes.sysctls_set
                ));
            }
            Step::PrepareRootfs => {
                let ours = self.state.is_some();
                let rootfs = under(&self.root, &self.slot.rootfs());
                if rootfs::install_rootfs(&self.config().config, &rootfs, ours, &self.fetcher)? {
                    self.line(&format!("unpacked the machine rootfs to {}", rootfs.display()));
                }
                self.populate(self.slot, None)?;
            }
            Step::StartNode => self.start_node()?,
            Step::InstallDaemon => self.install_daemon()?,
            Step::Commit => self.commit(self.slot)?,
            Step::EnsureRunning => self.ensure_running()?,
            Step::RenderLocalDns => {
                let rendered = self.render(self.slot)?;
                let written = crate::start::files::write_changed(&self.root, &rendered, |p| {
                    !manifest::is_shared_host_file(p)
                })?;
                for path in &written {
                    self.line(&format!("rewrote {}", path.display()));
                }
                if written.iter().any(|p| p.starts_with("/etc/systemd/system")) {
                    node::daemon_reload()?;
                }
                if written.is_empty() {
                    self.line("LocalDNS files unchanged (same upstreams)");
                }
            }
            Step::StopNode => stop_node(self.slot, self.progress)?,
            Step::Reconfigure => reconfigure::run(self)?,
            Step::Repave(phase) => repave::run_phase(self, phase)?,
            Step::FinishRepave => {
                repave_state::clear(&self.repave_path)?;
                self.repave = None;
                self.line(&format!("the node runs in {}", self.slot));
            }
            Step::Reset => unreachable!("reset is not planned through the executor"),
        }
        Ok(())
    }

    /// Saves `err` of `step` as the last failure when the node has a state (a start refused
    /// before it wrote one has nothing to record it in); a failure to save it is only logged,
    /// `err` is what the caller reports.
    fn record_failure(&mut self, step: Step, err: &LifecycleError) {
        let Some(mut s) = self.state.clone() else { return };
        s.last_failure = Some(FailedOperation {
            kind: self.op.name().into(),
            step: step.name().into(),
            failed_at: unix_now(),
            error: crate::error_chain::chain(err),
        });
        if let Err(save) = self.save_state(s) {
            tracing::warn!(error = %save, "cannot record the failed step in the install state");
        }
    }

    /// Clears the operation record and the last failure and, when the operation `changed` the
    /// node (more than making sure it runs) or followed a failure, records it as the last one
    /// finished; returns the slot the node runs in.
    pub fn finish(mut self, changed: bool) -> Result<Slot, LifecycleError> {
        if let Some(mut s) = self.state.clone()
            && (changed || s.operation.is_some() || s.last_failure.is_some())
        {
            s.operation = None;
            s.last_failure = None;
            s.last_operation = Some(FinishedOperation {
                kind: self.op.name().into(),
                finished_at: unix_now(),
                slot: self.slot,
            });
            self.save_state(s)?;
        }
        Ok(self.slot)
    }

    fn preflight(&self) -> Result<(), StartError> {
        let config = self.config();
        let ctx = preflight::Context {
            config_path: config.path.clone(),
            config: Ok(config.config.clone()),
        };
        let report = preflight::run(preflight::CHECKS, &ctx, &self.ignore_checks);
        for line in report.to_text().lines() {
            self.progress.line(line);
        }
        if report.status == Severity::Error {
            return Err(StartError::Preflight {
                report: report.to_text(),
            });
        }
        Ok(())
    }

    /// Installs the binaries, images and files of `slot` (all of `rendered` but the kernel
    /// settings; `rendered` defaults to the slot's files now) and records them in the manifest.
    pub fn populate(&mut self, slot: Slot, rendered: Option<Rendered>) -> Result<(), StartError> {
        let rendered = match rendered {
            Some(r) => r,
            None => self.render(slot)?,
        };
        let rootfs = under(&self.root, &slot.rootfs());
        let populated = rootfs::populate(
            &self.config().config,
            &rendered,
            &rootfs,
            &self.root,
            &self.fetcher,
            self.progress,
        )?;
        let binaries: Vec<(PathBuf, String)> = populated
            .binaries
            .iter()
            .map(|b| {
                (
                    slot.rootfs().join(b.path.trim_start_matches('/')),
                    b.sha256.clone(),
                )
            })
            .collect();
        if let Some(mut s) = self.state.clone() {
            s.manifest.record(slot, &rendered, &binaries);
            self.save_state(s)?;
        }
        self.populated = Some(populated);
        Ok(())
    }

    /// The image archives of the config (installed by a populate of this run, or earlier).
    fn images(&self) -> Result<Vec<ImageArchive>, StartError> {
        match &self.populated {
            Some(populated) => Ok(populated.images.clone()),
            None => rootfs::image_archives(&self.config().config),
        }
    }

    /// Writes the applied config of `slot` (the network unit reads it) unless it is there.
    pub fn write_applied(&self, slot: Slot) -> Result<(), StartError> {
        let (applied, _) = node::applied_paths(&self.root, slot);
        let bytes = &self.config().bytes;
        if std::fs::read(&applied).ok().as_deref() != Some(bytes.as_slice()) {
            write_atomic(&applied, bytes, 0o600).map_err(|source| StartError::Io {
                action: "write",
                path: applied.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// Stage `starting-node`, in the order of docs/design.md §9, on the executor's slot.
    fn start_node(&mut self) -> Result<(), StartError> {
        if self.op == Operation::Start && self.populated.is_none() {
            // Resumed at `starting-node`: `preparing-rootfs` finished with this very config (the
            // planner resumes only on the recorded config's sha256), so the rootfs holds its
            // binaries, images and files; checking them again hashed ~200 MB, about a minute
            // under emulation.
            self.line("resumed at starting-node: the rootfs was populated with this config");
        }
        self.write_applied(self.slot)?;
        // `start` always reloads: one resumed (in this stage or in `preparing-rootfs`, whose
        // files are then all there already) cannot tell whether the stopped run reloaded after
        // it wrote the host units.
        if self.op == Operation::Start
            || self
                .populated
                .as_ref()
                .is_some_and(|populated| populated.host_units_changed)
        {
            node::daemon_reload()?;
        }
        let images = self.images()?;
        start_slot(self, self.slot, &images)
    }

    /// The agent daemon as the config says: installed and running with its credentials, or
    /// removed when the config has no `Daemon` section.
    pub fn install_daemon(&self) -> Result<(), StartError> {
        let agent = std::env::current_exe().map_err(|source| StartError::Io {
            action: "find the path of",
            path: "this agent binary (/proc/self/exe)".into(),
            source,
        })?;
        let changes = daemon_unit::converge(&self.root, &self.config().config, &agent)?;
        for path in &changes.paths {
            self.line(&format!("daemon: wrote or removed {}", path.display()));
        }
        if !changes.unit.is_empty() {
            self.line(&format!(
                "daemon: {} {}",
                crate::paths::DAEMON_UNIT_NAME,
                changes.unit.join(", ")
            ));
        }
        if self.config().config.daemon.is_none() && changes == Default::default() {
            self.line("daemon: not installed (the config has no `Daemon` section)");
        }
        Ok(())
    }

    /// The applied config's sidecar, the manifest and the install state `complete` for `slot`.
    pub fn commit(&mut self, slot: Slot) -> Result<(), StartError> {
        self.write_applied(slot)?;
        let (applied, sidecar) = node::applied_paths(&self.root, slot);
        let name = applied
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let digest = checksum::sha256_file(&applied).map_err(|source| StartError::Io {
            action: "hash",
            path: applied.clone(),
            source,
        })?;
        write_atomic(&sidecar, format!("{digest}  {name}\n").as_bytes(), 0o644).map_err(|source| {
            StartError::Io {
                action: "write",
                path: sidecar.clone(),
                source,
            }
        })?;
        let manifest = self
            .state
            .as_ref()
            .map(|s| s.manifest.clone())
            .unwrap_or_default();
        let mut done = InstallState::new(slot, Stage::Complete, &self.config().sha256);
        done.manifest = Manifest {
            slots: manifest.slots.into_iter().filter(|(s, _)| *s == slot).collect(),
            ..manifest
        };
        done.operation = self.state.as_ref().and_then(|s| s.operation.clone());
        self.save_state(done)?;
        self.slot = slot;
        self.line(&format!(
            "{slot} committed with config sha256 {}",
            self.config().sha256
        ));
        Ok(())
    }

    /// On a finished node: the machine and kubelet must run; start what does not (a running unit
    /// is left alone, so its invocation id stays).
    fn ensure_running(&self) -> Result<(), StartError> {
        let config = &self.config().config;
        let runner = Self::runner(self.slot);
        if !machinectl::is_running(runner.machine())? {
            self.line(&format!(
                "machine {} is not running; starting it",
                runner.machine()
            ));
            node::host_network(config, self.progress)?;
            node::machine(&runner, self.waits, self.progress)?;
            node::localdns_ready(config, self.waits, self.progress)?;
        }
        if runner.unit_state("kubelet.service")? != "active" {
            node::containerd(&runner, self.waits)?;
            node::kubelet(&runner, self.waits)?;
        }
        self.install_daemon()?;
        // A rebuilt agent brings a new supervisor: replace it and restart LocalDNS on it (an
        // unchanged agent leaves both alone).
        if config.local_dns.is_some() && rootfs::replace_supervisor(&under(&self.root, &self.slot.rootfs()))?
        {
            localdns_restart::restart_localdns(&runner, config, self.waits, self.progress)?;
            self.line("the agent changed: replaced the LocalDNS supervisor and restarted localdns.service");
            return Ok(());
        }
        self.line(&format!(
            "node in machine {} already started with this config; nothing changed",
            self.slot
        ));
        Ok(())
    }
}

/// Network → machine → LocalDNS ready → containerd → images → kubelet, for `slot`.
pub fn start_slot(exec: &Executor, slot: Slot, images: &[ImageArchive]) -> Result<(), StartError> {
    let config = &exec.config().config;
    let runner = Executor::runner(slot);
    node::host_network(config, exec.progress)?;
    node::machine(&runner, exec.waits, exec.progress)?;
    node::localdns_ready(config, exec.waits, exec.progress)?;
    node::containerd(&runner, exec.waits)?;
    node::import_images(&runner, images, exec.progress)?;
    node::kubelet(&runner, exec.waits)?;
    exec.line(&format!("kubelet is active in machine {slot}"));
    Ok(())
}

/// kubelet → containerd → the machine, stopped (what is not running is left alone).
pub fn stop_node(slot: Slot, progress: &dyn Progress) -> Result<(), StartError> {
    let runner = Executor::runner(slot);
    if machinectl::is_running(slot.as_str())? {
        for unit in ["kubelet.service", "containerd.service"] {
            runner.run(&["systemctl", "stop", unit])?;
            progress.line(&format!("stopped {unit} in {slot}"));
        }
    }
    machinectl::stop(slot.as_str())?;
    progress.line(&format!("machine {slot} stopped"));
    Ok(())
}

/// The machine's boot id (`/proc/sys/kernel/random/boot_id` inside it; nspawn gives each boot
/// its own, and kubelet reports it as the Node's `bootID`).
pub fn boot_id(slot: Slot) -> Result<String, StartError> {
    Ok(Executor::runner(slot)
        .run_stdout(&["cat", "/proc/sys/kernel/random/boot_id"])?
        .trim()
        .to_owned())
}

/// Seconds since the Unix epoch (0 for a clock before it).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
