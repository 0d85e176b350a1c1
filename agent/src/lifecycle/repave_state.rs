//! The repave record, `/etc/unbounded/agent/repave-state.json` (0600, written atomically and
//! fsynced): which slot a repave leaves and which it moves to, and the phase entered last —
//! written *before* the phase runs, so a repave killed anywhere is finished by the next
//! `unbounded-agent repave` (or `start`, which refuses to act while one is recorded).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::files::write_atomic;
use crate::names::Slot;

/// Where the record lives on the host.
pub const PATH: &str = crate::paths::REPAVE_STATE;

/// The phases, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// The target slot's rootfs, binaries, images and files are installed; the source runs on.
    /// Every download happens here.
    Preparing,
    /// The source node stops; the slot-specific host state (network unit, nspawn drop-ins,
    /// applied config) moves to the target.
    Switching,
    /// The target node starts in the order of docs/design.md §9.
    Starting,
    /// The target machine has a new boot id, LocalDNS is ready and kubelet is active.
    Verifying,
    /// The install state names the target; from here on the repave only goes forward.
    Committed,
    /// The source's machine, rootfs, settings and applied config are removed.
    Cleaning,
}

impl Phase {
    pub const ALL: [Phase; 6] = [
        Phase::Preparing,
        Phase::Switching,
        Phase::Starting,
        Phase::Verifying,
        Phase::Committed,
        Phase::Cleaning,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Preparing => "preparing",
            Phase::Switching => "switching",
            Phase::Starting => "starting",
            Phase::Verifying => "verifying",
            Phase::Committed => "committed",
            Phase::Cleaning => "cleaning",
        }
    }
}

/// The record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepaveState {
    pub from: Slot,
    pub to: Slot,
    pub phase: Phase,
    /// SHA-256 of the config the target slot is installed with.
    pub config_sha256: String,
    /// The source machine's boot id when the repave began (the target's must differ).
    #[serde(default)]
    pub source_boot_id: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RepaveStateError {
    #[error("cannot read repave state {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("repave state {path} is not valid: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("cannot write repave state {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Reads the record; `None` when no repave is under way.
pub fn load(path: &Path) -> Result<Option<RepaveState>, RepaveStateError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| RepaveStateError::Invalid {
                path: path.into(),
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(RepaveStateError::Read {
            path: path.into(),
            source,
        }),
    }
}

/// Writes the record atomically (0600, fsynced).
pub fn save(path: &Path, state: &RepaveState) -> Result<(), RepaveStateError> {
    let mut text = serde_json::to_string_pretty(state).expect("the repave state serialises");
    text.push('\n');
    write_atomic(path, text.as_bytes(), 0o600).map_err(|source| RepaveStateError::Write {
        path: path.into(),
        source,
    })
}

/// Removes the record (the repave is over); an absent record is fine.
pub fn clear(path: &Path) -> Result<(), RepaveStateError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(RepaveStateError::Write {
            path: path.into(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_record_round_trips_private_and_clear_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent/repave-state.json");
        let state = RepaveState {
            from: Slot::Kube1,
            to: Slot::Kube2,
            phase: Phase::Verifying,
            config_sha256: "ab".into(),
            source_boot_id: "x".into(),
        };
        save(&path, &state).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"phase\": \"verifying\""), "{text}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load(&path).unwrap(), Some(state));
        clear(&path).unwrap();
        clear(&path).unwrap();
        assert_eq!(load(&path).unwrap(), None);
    }
}
