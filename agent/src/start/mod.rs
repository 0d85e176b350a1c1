//! `unbounded-agent start`: turns a host into a Kubernetes node running in an nspawn machine,
//! with LocalDNS when enabled (docs/agent.md; the order of docs/design.md §9).
//!
//! `start` is one operation of the lifecycle core ([`crate::lifecycle`]); this module holds the
//! node's building blocks the operations share. Stages, each recorded in the install state
//! ([`crate::lifecycle::state`]) *before* it runs:
//! 1. `preparing-host` ([`host`]): modules and sysctls, now and persisted;
//! 2. `preparing-rootfs` ([`rootfs`]): the machine rootfs, binaries, image archives and every
//!    file of the node ([`plan::node_files`]);
//! 3. `starting-node` ([`node`]): network → machine → LocalDNS ready → containerd → images → kubelet;
//! 4. `installing-daemon` ([`daemon_unit`]): the agent daemon's host unit and credentials, when the
//!    config has a `Daemon` section;
//! 5. `complete`, with the applied config's `.sha256` sidecar.
//!
//! Preflight runs first when nothing of the node runs yet; failing checks stop `start` with
//! their report and nothing changed. A second `start` with the same config changes nothing.

pub mod daemon_unit;
pub mod error;
pub mod files;
pub mod host;
pub mod localdns_restart;
pub mod node;
pub mod plan;
pub mod rootfs;

use std::path::Path;

pub use error::StartError;

use crate::validate::Config;

/// Reads and validates a config file; its bytes too (the applied config is a copy of them).
pub fn load_config(path: &Path) -> Result<(Config, Vec<u8>), StartError> {
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
