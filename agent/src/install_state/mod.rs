//! The install state, `/var/lib/unbounded/agent/install-state.json` (schema 2): the active slot, the
//! stage its install entered last and the digest of its config, what the agent created on the host
//! and in each slot (the [`Manifest`]), and the lifecycle operation under way with the step it
//! entered last. A step is recorded *before* it runs, so an interrupted run re-enters it (every
//! step is idempotent). Schema 1 records (written by earlier agents: slot, stage and digest only)
//! are read and migrated; a record of a newer schema is refused rather than guessed at.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod manifest;

use crate::files::write_atomic;
use crate::names::Slot;
use manifest::Manifest;

/// Where the state lives on the host.
pub const PATH: &str = crate::paths::INSTALL_STATE;
/// The schema this agent writes.
pub const SCHEMA: u32 = 2;

/// The stages of an install (`start`), in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    PreparingHost,
    PreparingRootfs,
    StartingNode,
    InstallingDaemon,
    Complete,
}

impl Stage {
    pub const ALL: [Stage; 5] = [
        Stage::PreparingHost,
        Stage::PreparingRootfs,
        Stage::StartingNode,
        Stage::InstallingDaemon,
        Stage::Complete,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::PreparingHost => "preparing-host",
            Stage::PreparingRootfs => "preparing-rootfs",
            Stage::StartingNode => "starting-node",
            Stage::InstallingDaemon => "installing-daemon",
            Stage::Complete => "complete",
        }
    }
}

/// A lifecycle operation under way on a finished node, and the step it entered last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationRecord {
    /// `reboot`, `apply`, ...
    pub kind: String,
    /// The step entered last (its [`crate::lifecycle::plan::Step::name`]).
    pub step: String,
    /// SHA-256 of the config the operation brings the node to.
    pub config_sha256: String,
}

/// The last lifecycle operation that ran to its end (`start`, `reboot`, `apply`, `repave`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinishedOperation {
    pub kind: String,
    /// Unix time (seconds) it finished.
    pub finished_at: u64,
    /// The slot the node ran in after it.
    pub slot: Slot,
}

/// The last lifecycle operation that stopped on an error, until one finishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedOperation {
    pub kind: String,
    /// The step that failed.
    pub step: String,
    /// Unix time (seconds) it failed.
    pub failed_at: u64,
    /// The error with its causes, one line.
    pub error: String,
}

/// The record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallState {
    pub schema: u32,
    /// The active slot: the one `start` installs or installed, the one a repave leaves.
    pub slot: Slot,
    /// The stage the active slot's install entered last.
    pub stage: Stage,
    /// SHA-256 of the config the active slot runs (or is being installed with).
    pub config_sha256: String,
    /// What the agent created, on the host and per slot.
    #[serde(default)]
    pub manifest: Manifest,
    /// The lifecycle operation under way, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<OperationRecord>,
    /// The last operation that finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<FinishedOperation>,
    /// The last operation that failed, since one last finished (cleared when one finishes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<FailedOperation>,
}

impl InstallState {
    /// A fresh record for an install of `slot` with a config of digest `config_sha256`.
    pub fn new(slot: Slot, stage: Stage, config_sha256: &str) -> InstallState {
        InstallState {
            schema: SCHEMA,
            slot,
            stage,
            config_sha256: config_sha256.to_owned(),
            manifest: Manifest::default(),
            operation: None,
            last_operation: None,
            last_failure: None,
        }
    }
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

/// Reads the state at `path` (migrating schema 1); `None` when there is none yet.
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

/// Parses a state record, checking the schema before anything else. A schema 1 record (slot,
/// stage, configSha256) becomes a schema 2 record with an empty manifest, which the next run
/// fills from what it renders.
pub fn parse(path: &Path, text: &str) -> Result<InstallState, StateError> {
    let invalid = |reason: String| StateError::Invalid {
        path: path.into(),
        reason,
    };
    let mut value: serde_json::Value = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
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
    if schema < 1 {
        return Err(invalid(format!("schema {schema} was never written by an agent")));
    }
    value["schema"] = serde_json::Value::from(SCHEMA);
    serde_json::from_value(value).map_err(|e| invalid(e.to_string()))
}

/// Writes `state` to `path` atomically (0600, fsynced).
pub fn save(path: &Path, state: &InstallState) -> Result<(), StateError> {
    let mut text = serde_json::to_string_pretty(state).expect("the state serialises");
    text.push('\n');
    write_atomic(path, text.as_bytes(), 0o600).map_err(|source| StateError::Write {
        path: path.into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_round_trips_with_kebab_case_stages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent/install-state.json");
        let mut state = InstallState::new(Slot::Kube2, Stage::PreparingRootfs, "ab");
        state.operation = Some(OperationRecord {
            kind: "reboot".into(),
            step: "stop-node".into(),
            config_sha256: "ab".into(),
        });
        save(&path, &state).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"stage\": \"preparing-rootfs\""), "{text}");
        assert!(text.contains("\"schema\": 2"), "{text}");
        assert_eq!(load(&path).unwrap(), Some(state));
        assert_eq!(load(&dir.path().join("none")).unwrap(), None);
    }

    #[test]
    fn a_schema_1_record_is_migrated_with_its_slot_stage_and_digest() {
        let text = r#"{"schema": 1, "slot": "kube2", "stage": "starting-node", "configSha256": "cd"}"#;
        let state = parse(Path::new("s.json"), text).unwrap();
        assert_eq!(state, InstallState::new(Slot::Kube2, Stage::StartingNode, "cd"));
    }

    #[test]
    fn a_newer_schema_is_refused_whatever_else_it_holds() {
        let err = parse(Path::new("s.json"), r#"{"schema": 3, "stage": "teleporting"}"#).unwrap_err();
        assert!(matches!(err, StateError::NewerSchema { found: 3, .. }), "{err}");
        assert!(err.to_string().contains("newer than this agent's 2"), "{err}");
        let err = parse(Path::new("s.json"), r#"{"stage": "complete"}"#).unwrap_err();
        assert!(err.to_string().contains("no numeric \"schema\""), "{err}");
    }
}
