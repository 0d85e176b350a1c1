//! The install state, `/var/lib/unbounded/agent/install-state.json`: which stage `start` entered
//! last, for which slot and config. A checkpoint is written *before* each stage, so an
//! interrupted `start` re-enters that stage (every stage is idempotent); a record written by a
//! newer schema is refused rather than guessed at.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::names::Slot;
use crate::render::write::write_atomic;

/// Where the state lives on the host.
pub const PATH: &str = "/var/lib/unbounded/agent/install-state.json";
/// The schema this agent writes and reads.
pub const SCHEMA: u32 = 1;

/// The stages, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    PreparingHost,
    PreparingRootfs,
    StartingNode,
    Complete,
}

impl Stage {
    pub const ALL: [Stage; 4] = [
        Stage::PreparingHost,
        Stage::PreparingRootfs,
        Stage::StartingNode,
        Stage::Complete,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::PreparingHost => "preparing-host",
            Stage::PreparingRootfs => "preparing-rootfs",
            Stage::StartingNode => "starting-node",
            Stage::Complete => "complete",
        }
    }
}

/// The record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallState {
    pub schema: u32,
    pub slot: Slot,
    pub stage: Stage,
    /// SHA-256 of the config file `start` was given.
    pub config_sha256: String,
}

/// The state file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read install state {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("install state {path} is not valid: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error(
        "install state {path} has schema {found}, newer than this agent's {SCHEMA}; \
         refusing to continue an install a newer agent began"
    )]
    NewerSchema { path: PathBuf, found: u64 },
    #[error("cannot write install state {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Reads the state at `path`; `None` when there is none yet.
pub fn load(path: &Path) -> Result<Option<InstallState>, StateError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StateError::Read {
                path: path.into(),
                source,
            });
        }
    };
    parse(path, &text).map(Some)
}

/// Parses a state record, checking the schema before anything else.
pub fn parse(path: &Path, text: &str) -> Result<InstallState, StateError> {
    let invalid = |reason: String| StateError::Invalid {
        path: path.into(),
        reason,
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let schema = value
        .get("schema")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| invalid("no numeric \"schema\"".into()))?;
    if schema > u64::from(SCHEMA) {
        return Err(StateError::NewerSchema {
            path: path.into(),
            found: schema,
        });
    }
    serde_json::from_value(value).map_err(|e| invalid(e.to_string()))
}

/// Writes `state` to `path` atomically (0600).
pub fn save(path: &Path, state: &InstallState) -> Result<(), StateError> {
    let mut text = serde_json::to_string_pretty(state).expect("the state serialises");
    text.push('\n');
    write_atomic(path, text.as_bytes(), 0o600).map_err(|source| StateError::Write {
        path: path.into(),
        source,
    })
}

/// Where a run begins, given the recorded state and this run's slot and config digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// From this stage on.
    From(Stage),
    /// The node was started with this very config: nothing to change.
    AlreadyComplete,
    /// A finished node with another config: `start` does not reconfigure a node.
    CompleteWithOtherConfig,
}

/// Decides where to begin: nothing recorded or another config mid-install → from the start;
/// the same config mid-install → the recorded stage; finished → nothing to do (or refused when
/// the config differs).
pub fn resume(recorded: Option<&InstallState>, config_sha256: &str) -> Resume {
    match recorded {
        None => Resume::From(Stage::PreparingHost),
        Some(s) if s.stage == Stage::Complete && s.config_sha256 == config_sha256 => Resume::AlreadyComplete,
        Some(s) if s.stage == Stage::Complete => Resume::CompleteWithOtherConfig,
        Some(s) if s.config_sha256 == config_sha256 => Resume::From(s.stage),
        Some(_) => Resume::From(Stage::PreparingHost),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(stage: Stage, sha: &str) -> InstallState {
        InstallState {
            schema: SCHEMA,
            slot: Slot::Kube1,
            stage,
            config_sha256: sha.into(),
        }
    }

    #[test]
    fn the_record_round_trips_with_kebab_case_stages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent/install-state.json");
        save(&path, &state(Stage::PreparingRootfs, "ab")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"stage\": \"preparing-rootfs\""), "{text}");
        assert_eq!(load(&path).unwrap(), Some(state(Stage::PreparingRootfs, "ab")));
        assert_eq!(load(&dir.path().join("none")).unwrap(), None);
    }

    #[test]
    fn a_newer_schema_is_refused_whatever_else_it_holds() {
        let err = parse(Path::new("s.json"), r#"{"schema": 2, "stage": "teleporting"}"#).unwrap_err();
        assert!(matches!(err, StateError::NewerSchema { found: 2, .. }), "{err}");
        assert!(err.to_string().contains("newer than this agent's 1"), "{err}");
        let err = parse(Path::new("s.json"), r#"{"stage": "complete"}"#).unwrap_err();
        assert!(err.to_string().contains("no numeric \"schema\""), "{err}");
    }

    #[test]
    fn resume_re_enters_the_recorded_stage_only_for_the_same_config() {
        assert_eq!(resume(None, "a"), Resume::From(Stage::PreparingHost));
        for stage in [Stage::PreparingHost, Stage::PreparingRootfs, Stage::StartingNode] {
            assert_eq!(resume(Some(&state(stage, "a")), "a"), Resume::From(stage));
            assert_eq!(
                resume(Some(&state(stage, "b")), "a"),
                Resume::From(Stage::PreparingHost)
            );
        }
        assert_eq!(
            resume(Some(&state(Stage::Complete, "a")), "a"),
            Resume::AlreadyComplete
        );
        assert_eq!(
            resume(Some(&state(Stage::Complete, "b")), "a"),
            Resume::CompleteWithOtherConfig
        );
    }
}
