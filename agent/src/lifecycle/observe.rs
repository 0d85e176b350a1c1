//! Observe: the host's records read into the typed picture the planner takes, and the config the
//! operation acts with (given, or the applied config of the slot concerned).

use std::path::{Path, PathBuf};

use super::change;
use super::error::LifecycleError;
use super::plan::{Change, Desired, Observed, Operation};
use super::{Options, repave_state, state};
use crate::files::under;
use crate::names::Slot;
use crate::start::node::applied_paths;
use crate::start::{StartError, load_config};
use crate::validate::Config;

/// A config file read and validated.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub path: PathBuf,
    pub config: Config,
    pub bytes: Vec<u8>,
    pub sha256: String,
}

impl LoadedConfig {
    pub fn load(path: &Path) -> Result<LoadedConfig, StartError> {
        let (config, bytes) = load_config(path)?;
        Ok(LoadedConfig {
            path: path.into(),
            config,
            sha256: sha256_hex(&bytes),
            bytes,
        })
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.bytes).unwrap_or(serde_json::Value::Null)
    }
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// What observing found.
#[derive(Debug, Clone)]
pub struct Observation {
    pub planner: Observed,
    pub desired: Desired,
    /// The slot the operation acts on: the recorded one (`kube1` on a fresh host).
    pub slot: Slot,
    /// The config to act with; `None` only when the planner will refuse (no finished node).
    pub config: Option<LoadedConfig>,
    /// `apply`: the config the slot runs now.
    pub applied: Option<LoadedConfig>,
}

fn applied_config(root: &Path, slot: Slot) -> Result<LoadedConfig, StartError> {
    LoadedConfig::load(&applied_paths(root, slot).0)
}

/// Reads the records and the configs `op` needs.
pub fn observe(op: Operation, options: &Options) -> Result<Observation, LifecycleError> {
    let root = &options.root;
    let recorded = state::load(&under(root, Path::new(state::PATH))).map_err(StartError::from)?;
    let repave = repave_state::load(&under(root, Path::new(repave_state::PATH)))?;
    let slot = recorded.as_ref().map(|s| s.slot).unwrap_or(Slot::Kube1);
    let finished = recorded
        .as_ref()
        .is_some_and(|s| s.stage == state::Stage::Complete);
    let given = || -> Result<LoadedConfig, LifecycleError> {
        let path = options
            .config_path
            .as_deref()
            .ok_or(LifecycleError::NeedsConfig { op: op.name() })?;
        Ok(LoadedConfig::load(path)?)
    };
    let (config, applied) = match op {
        Operation::Start => (Some(given()?), None),
        Operation::Apply if finished => (Some(given()?), Some(applied_config(root, slot)?)),
        Operation::Reboot if finished => (Some(applied_config(root, slot)?), None),
        Operation::Repave { .. } if finished => match &repave {
            Some(r) => (Some(applied_config(root, r.to)?), None),
            None if options.config_path.is_some() => (Some(given()?), None),
            None => (Some(applied_config(root, slot)?), None),
        },
        _ => (None, None),
    };
    let change = match (&config, &applied) {
        (Some(new), Some(old)) if new.sha256 != old.sha256 => change::classify(&old.json(), &new.json()),
        _ => Change::Same,
    };
    let desired = Desired {
        config_sha256: config.as_ref().map(|c| c.sha256.clone()).unwrap_or_default(),
        change,
    };
    Ok(Observation {
        planner: Observed {
            state: recorded,
            repave,
        },
        desired,
        slot,
        config,
        applied,
    })
}
