//! `unbounded-agent start`: turns a host into a Kubernetes node running in an nspawn machine,
//! with LocalDNS when enabled (issue #8, spec §9).
//!
//! Stages, each announced in the install state ([`state`]) *before* it runs:
//! 1. `preparing-host` ([`host`]): modules and sysctls, now and persisted;
//! 2. `preparing-rootfs` ([`rootfs`]): the machine rootfs, binaries, image archives and every
//!    file of the node ([`plan::node_files`]);
//! 3. `starting-node` ([`node`]): network → machine → LocalDNS ready → containerd → images → kubelet;
//! 4. `complete`, with the applied config's `.sha256` sidecar.
//!
//! Preflight runs first when nothing of the node runs yet; failing checks stop `start` with
//! their report and nothing changed. A second `start` with the same config changes nothing.

pub mod error;
pub mod files;
pub mod host;
pub mod node;
pub mod plan;
pub mod rootfs;
pub mod state;

use std::path::{Path, PathBuf};

pub use error::StartError;
use state::{InstallState, Resume, Stage};

use crate::artifact::{FetchOptions, Fetcher, checksum};
use crate::goal::HostFacts;
use crate::machine::{MachineRunner, machinectl};
use crate::names::Slot;
use crate::preflight::{self, Severity};
use crate::render::write::{under, write_atomic};
use crate::validate::Config;

/// What `start` is given.
#[derive(Debug, Clone)]
pub struct Options {
    pub config_path: PathBuf,
    /// Files are written below this directory (`/` on a real host).
    pub root: PathBuf,
    /// Preflight checks whose failures do not stop `start`.
    pub ignore_checks: Vec<String>,
    /// Multiplies every wait (machine, LocalDNS, containerd, kubelet); `None`: detected
    /// ([`node::Waits::given_or_detected`]).
    pub timeout_scale: Option<u32>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The node was started (from the given stage on).
    Started { slot: Slot, resumed_from: Stage },
    /// The node already ran with this config; nothing changed.
    Unchanged { slot: Slot },
}

/// One progress line on stdout.
pub fn log(line: &str) {
    println!("start: {line}");
}

/// The slot `start` installs: the recorded one, else `kube1` (first install).
pub fn slot(recorded: Option<&InstallState>) -> Slot {
    recorded.map(|s| s.slot).unwrap_or(Slot::Kube1)
}

fn load_config(path: &Path) -> Result<(Config, Vec<u8>), StartError> {
    let bytes = std::fs::read(path).map_err(|source| StartError::ReadConfig {
        path: path.into(),
        source,
    })?;
    let config =
        crate::validate::parse(&String::from_utf8_lossy(&bytes)).map_err(|p| StartError::InvalidConfig {
            path: path.into(),
            problems: p.to_string(),
        })?;
    Ok((config, bytes))
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

fn run_preflight(options: &Options, config: &Config) -> Result<(), StartError> {
    let ctx = preflight::Context {
        config_path: options.config_path.clone(),
        config: Ok(config.clone()),
    };
    let report = preflight::run(preflight::CHECKS, &ctx, &options.ignore_checks);
    print!("{}", report.to_text());
    if report.status == Severity::Error {
        return Err(StartError::Preflight {
            report: report.to_text(),
        });
    }
    Ok(())
}

/// Runs `start`.
pub fn run(options: &Options) -> Result<Outcome, StartError> {
    let (config, config_bytes) = load_config(&options.config_path)?;
    let config_sha256 = sha256_hex(&config_bytes);
    let state_path = under(&options.root, Path::new(state::PATH));
    let recorded = state::load(&state_path)?;
    let slot = slot(recorded.as_ref());
    let runner = MachineRunner::new(slot.as_str());
    let waits = node::Waits::given_or_detected(options.timeout_scale);
    let resumed_from = match state::resume(recorded.as_ref(), &config_sha256) {
        Resume::AlreadyComplete => {
            ensure_running(&config, &runner, waits)?;
            log(&format!(
                "node in machine {slot} already started with this config; nothing changed"
            ));
            return Ok(Outcome::Unchanged { slot });
        }
        Resume::CompleteWithOtherConfig => {
            return Err(StartError::OtherConfig {
                slot: slot.to_string(),
                recorded: recorded.map(|r| r.config_sha256).unwrap_or_default(),
                given: config_sha256,
            });
        }
        Resume::From(stage) => stage,
    };

    // Everything decided before anything changes.
    let facts = HostFacts::gather(Path::new("/"), config.node_name.as_str())?;
    let goal = crate::goal::resolve(&config, &facts, slot)?;
    let rendered = plan::node_files(&config, &goal, &facts.host_resolv_conf)?;
    if resumed_from < Stage::StartingNode {
        run_preflight(options, &config)?;
    } else {
        log("preflight skipped: resuming a start whose machine may already run");
    }
    let checkpoint = |stage: Stage| -> Result<(), StartError> {
        log(&format!("stage {}", stage.as_str()));
        state::save(
            &state_path,
            &InstallState {
                schema: state::SCHEMA,
                slot,
                stage,
                config_sha256: config_sha256.clone(),
            },
        )?;
        Ok(())
    };
    let fetcher = Fetcher::new(FetchOptions::default());
    let rootfs = under(&options.root, &slot.rootfs());

    if resumed_from <= Stage::PreparingHost {
        checkpoint(Stage::PreparingHost)?;
        let changes = host::prepare(&options.root, &rendered)?;
        log(&format!(
            "host prepared (files written: {}, modules loaded: {:?}, sysctls set: {:?})",
            changes.files.len(),
            changes.modules_loaded,
            changes.sysctls_set
        ));
    }
    if resumed_from <= Stage::PreparingRootfs {
        checkpoint(Stage::PreparingRootfs)?;
        if rootfs::install_rootfs(&config, &rootfs, recorded.is_some(), &fetcher)? {
            log(&format!("unpacked the machine rootfs to {}", rootfs.display()));
        }
    }
    // The image list is needed when resuming at `starting-node` too; installing is idempotent.
    let (images, units_changed) = rootfs::populate(&config, &rendered, &rootfs, &options.root, &fetcher)?;

    checkpoint(Stage::StartingNode)?;
    let (applied, sidecar) = node::applied_paths(&options.root, slot);
    if std::fs::read(&applied).ok().as_deref() != Some(config_bytes.as_slice()) {
        write_atomic(&applied, &config_bytes, 0o600).map_err(|source| StartError::Io {
            action: "write",
            path: applied.clone(),
            source,
        })?;
    }
    if units_changed {
        node::daemon_reload()?;
    }
    node::host_network(&config)?;
    node::machine(&runner, waits)?;
    node::localdns_ready(&config, waits)?;
    node::containerd(&runner, waits)?;
    node::import_images(&runner, &images)?;
    node::kubelet(&runner, waits)?;
    log(&format!("kubelet is active in machine {slot}"));

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
    checkpoint(Stage::Complete)?;
    Ok(Outcome::Started { slot, resumed_from })
}

/// On a finished node: the machine and kubelet must run; start what does not (a running unit is
/// left alone, so its invocation id stays).
fn ensure_running(config: &Config, runner: &MachineRunner, waits: node::Waits) -> Result<(), StartError> {
    if !machinectl::is_running(runner.machine())? {
        log(&format!(
            "machine {} is not running; starting it",
            runner.machine()
        ));
        node::host_network(config)?;
        node::machine(runner, waits)?;
        node::localdns_ready(config, waits)?;
    }
    if runner.unit_state("kubelet.service")? != "active" {
        node::containerd(runner, waits)?;
        node::kubelet(runner, waits)?;
    }
    Ok(())
}
