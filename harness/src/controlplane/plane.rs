//! The seam between the lab and what runs its cluster: [`ControlPlane`], and the inputs it gets
//! ([`ControlPlaneSpec`]). [`crate::kind::KindControlPlane`], a Kind cluster wired to the lab,
//! is the one implementation; the lab and the checkpoints see only this trait.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::access::ClusterAccess;
use crate::addresses::LabAddrs;

/// A running control plane of one lab.
pub trait ControlPlane: Send + Sync {
    /// How to reach the cluster.
    fn access(&self) -> &ClusterAccess;
    /// Stops everything it started (idempotent); returns what could not be stopped.
    fn stop(&mut self) -> Vec<String>;
    /// Stops it and saves its state into `into` (a new directory) for a later start from that
    /// state (`LabSpec::control_plane_state`, a checkpoint's); returns what failed.
    fn stop_saving(&mut self, into: &Path) -> Vec<String>;
    /// How to run Kind's CLI against it.
    fn kind_record(&self) -> Option<KindRecord>;
}

/// How to run Kind's CLI against a lab's Kind cluster (e.g. `kind export logs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindRecord {
    /// `lab-<n>`, as `kind get clusters` lists it.
    pub name: String,
    /// The `kind` binary.
    pub kind: PathBuf,
    /// Its environment (the provider, Podman's `CONTAINERS_CONF`, the cluster's network).
    pub env: Vec<(String, String)>,
}

/// What a control plane is started with.
#[derive(Clone, Debug)]
pub struct ControlPlaneSpec {
    pub addrs: LabAddrs,
    /// Its state (Kind's kubeconfig, the engine's config, the objects applied):
    /// `<lab run dir>/control-plane`, removed with the lab.
    pub state_dir: PathBuf,
    /// Its logs (`kind-create.log`, ...): `<lab log dir>/control-plane`.
    pub log_dir: PathBuf,
    /// Where the admin kubeconfig for the host goes: `<lab run dir>/kubeconfig`.
    pub admin_kubeconfig: PathBuf,
    /// The Kubernetes binaries (`harness::images::kubernetes`; its `kubectl`).
    pub bin_dir: PathBuf,
    /// `v1.35.4`.
    pub kubernetes_version: String,
    /// The CRDs installed once the API server is ready (`deploy/crd/`).
    pub crd_dir: PathBuf,
    /// The agent daemon's RBAC and admission policy, applied with the CRDs (`deploy/rbac/`).
    pub rbac_dir: PathBuf,
    /// How long each component may take to become ready.
    pub timeout: Duration,
}

impl ControlPlaneSpec {
    /// Readiness limit per component: 120 s times `LAB_TIMEOUT_SCALE` (default 1).
    pub fn default_timeout() -> Duration {
        let scale = std::env::var("LAB_TIMEOUT_SCALE")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|s| *s > 0.0)
            .unwrap_or(1.0);
        Duration::from_secs_f64(120.0 * scale)
    }
}
