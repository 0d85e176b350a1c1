//! The seam between the lab and whatever runs its cluster: [`ControlPlane`], and the
//! inputs every implementation gets ([`ControlPlaneSpec`]). [`super::ProcessControlPlane`]
//! runs the components as processes in the lab namespace; [`crate::kind::KindControlPlane`]
//! is a Kind cluster wired to the lab.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::access::ClusterAccess;
use crate::lab::addr::{API_SERVER_PORT, LabAddrs};

/// A running control plane of one lab.
pub trait ControlPlane: Send + Sync {
    /// How to reach the cluster.
    fn access(&self) -> &ClusterAccess;
    /// The pids of its processes on this host (empty if it has none), for leak checks.
    fn pids(&self) -> Vec<i32>;
    /// Stops everything it started (idempotent); returns what could not be stopped.
    fn stop(&mut self) -> Vec<String>;
    /// Stops it and saves its state into `into` (a new directory) for a later start from that
    /// state (`LabSpec::control_plane_state`, a checkpoint's); returns what failed.
    fn stop_saving(&mut self, into: &Path) -> Vec<String>;
    /// How to run Kind's CLI against it, when it is a Kind cluster.
    fn kind_record(&self) -> Option<crate::lab::record::KindRecord> {
        None
    }
}

/// The first host loopback port the API server is forwarded to: lab `n` prefers `16443 + n`.
pub const HOST_API_PORT_BASE: u16 = 16443;

/// What a control plane is started with.
#[derive(Clone, Debug)]
pub struct ControlPlaneSpec {
    pub addrs: LabAddrs,
    /// Its state (PKI, etcd data, Corefile): `<lab run dir>/control-plane`, removed with the lab.
    pub state_dir: PathBuf,
    /// Its processes' logs (`<name>.log`): `<lab log dir>/control-plane`.
    pub log_dir: PathBuf,
    /// Where the admin kubeconfig for the host goes: `<lab run dir>/kubeconfig`.
    pub admin_kubeconfig: PathBuf,
    /// The Kubernetes binaries and etcd (`harness::images::kubernetes`).
    pub bin_dir: PathBuf,
    /// `v1.35.4`.
    pub kubernetes_version: String,
    /// The CoreDNS binary (`harness::images::coredns`).
    pub coredns: PathBuf,
    /// The CRDs installed once the API server is ready (`deploy/crd/`).
    pub crd_dir: PathBuf,
    /// The agent daemon's RBAC and admission policy, applied with the CRDs (`deploy/rbac/`).
    pub rbac_dir: PathBuf,
    /// How long each component may take to become ready.
    pub timeout: Duration,
}

impl ControlPlaneSpec {
    /// `https://192.168.100.1:6443`.
    pub fn api_server(&self) -> String {
        format!("https://{}:{API_SERVER_PORT}", self.addrs.bridge_ip())
    }

    /// The host port lab `n` prefers, `16443 + n`.
    pub fn preferred_host_port(&self) -> u16 {
        HOST_API_PORT_BASE + u16::from(self.addrs.number())
    }

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
