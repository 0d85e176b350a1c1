//! Observe: the host's records read into the typed picture the planner takes, and the config the
//! operation acts with (given, or the applied config of the slot concerned).

use std::path::{Path, PathBuf};

use super::change;
use super::error::LifecycleError;
use super::plan::{Change, Desired, Observed, Operation};
use super::{Options, repave_state, state};
use crate::artifact::checksum::sha256_bytes;
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
            sha256: sha256_bytes(&bytes),
            bytes,
        })
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.bytes).unwrap_or(serde_json::Value::Null)
    }
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

/// The config a recorded repave installs its target with: the target's applied config once
/// `preparing` wrote it; before that (the run was killed early in `preparing`) the config the
/// repave began with — the `--config` given again, or the source's applied config — found by the
/// SHA-256 the record holds.
fn recorded_repave_config(
    root: &Path,
    record: &repave_state::RepaveState,
    given: Option<&Path>,
) -> Result<LoadedConfig, LifecycleError> {
    let target = applied_paths(root, record.to).0;
    if target.exists() {
        return Ok(LoadedConfig::load(&target)?);
    }
    let source = applied_paths(root, record.from).0;
    for candidate in given.into_iter().chain([source.as_path()]) {
        if candidate.exists() {
            let loaded = LoadedConfig::load(candidate)?;
            if loaded.sha256 == record.config_sha256 {
                return Ok(loaded);
            }
        }
    }
    Err(LifecycleError::RepaveConfigLost {
        to: record.to,
        sha256: record.config_sha256.clone(),
        looked_at: given
            .into_iter()
            .chain([target.as_path(), source.as_path()])
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
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
            Some(r) => (
                Some(recorded_repave_config(root, r, options.config_path.as_deref())?),
                None,
            ),
            None if options.config_path.is_some() => (Some(given()?), None),
            None => (Some(applied_config(root, slot)?), None),
        },
        _ => (None, None),
    };
    let change = match (&config, &applied) {
        (Some(new), Some(old)) if new.sha256 != old.sha256 => change::classify(
            &change::normal_form(&old.json()),
            &change::normal_form(&new.json()),
        ),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::repave_state::{Phase, RepaveState};

    const CONFIG: &str = r#"{"NodeName": "node1",
        "Cluster": {"CaCertBase64": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=", "ClusterDNS": "10.96.0.10"},
        "Kubelet": {"ApiServer": "https://192.168.100.1:6443", "Auth": {"BootstrapToken": "abcdef.0123456789abcdef"}}}"#;

    /// A finished node in `kube2` with its applied config, and a repave to `kube1` recorded in
    /// `preparing` (killed before it wrote the target's applied config), below a temporary root.
    fn killed_early_in_preparing(sha256: &str) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let source = applied_paths(root.path(), Slot::Kube2).0;
        std::fs::create_dir_all(source.parent().unwrap()).unwrap();
        std::fs::write(&source, CONFIG).unwrap();
        let state_path = under(root.path(), Path::new(state::PATH));
        state::save(
            &state_path,
            &state::InstallState::new(Slot::Kube2, state::Stage::Complete, sha256),
        )
        .unwrap();
        let record = RepaveState {
            from: Slot::Kube2,
            to: Slot::Kube1,
            phase: Phase::Preparing,
            config_sha256: sha256.to_owned(),
            source_boot_id: String::new(),
        };
        repave_state::save(&under(root.path(), Path::new(repave_state::PATH)), &record).unwrap();
        root
    }

    fn options(root: &Path) -> Options {
        Options {
            root: root.to_path_buf(),
            ..Options::on_host(None)
        }
    }

    #[test]
    fn a_repave_killed_before_the_target_config_was_written_resumes_with_the_recorded_config() {
        let sha = sha256_bytes(CONFIG.as_bytes());
        let root = killed_early_in_preparing(&sha);
        let seen = observe(Operation::Repave { to: None }, &options(root.path())).unwrap();
        let config = seen.config.expect("the repave's config");
        assert_eq!(config.sha256, sha);
        assert_eq!(config.path, applied_paths(root.path(), Slot::Kube2).0);
    }

    #[test]
    fn a_repave_whose_recorded_config_is_nowhere_is_an_error_naming_where_it_looked() {
        let root = killed_early_in_preparing(&"0".repeat(64));
        let err = observe(Operation::Repave { to: None }, &options(root.path())).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LifecycleError::RepaveConfigLost { .. }), "{text}");
        assert!(
            text.contains("kube1-applied-config.json") && text.contains("kube2-applied-config.json"),
            "{text}"
        );
    }
}
