//! [`ClusterAccess`]: what scenarios and nodes need to reach a running lab cluster.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::error::ControlPlaneError;

/// How to reach a lab's cluster. Every kubeconfig here works from the host namespace as it
/// is (it names the API server's port on the host's loopback, which Kind chose); `api_server`
/// is what the VMs use.
#[derive(Clone, Debug)]
pub struct ClusterAccess {
    /// The API server as the VMs reach it, `https://192.168.100.3:6443` (the Kind node).
    pub api_server: String,
    /// The API server from the host namespace, `https://127.0.0.1:<port>`.
    pub host_api_server: String,
    /// The cluster CA (PEM).
    pub ca_cert_pem: String,
    /// The bootstrap token `<id>.<secret>` a kubelet joins with.
    pub bootstrap_token: String,
    /// The cluster DNS Service address (`Cluster.ClusterDNS`), 10.96.0.10.
    pub cluster_dns: Ipv4Addr,
    /// The admin kubeconfig (`kubernetes-admin`, `system:masters`) naming `host_api_server`.
    pub admin_kubeconfig: PathBuf,
    /// A kubeconfig holding only the bootstrap token, naming `host_api_server`.
    pub bootstrap_kubeconfig: PathBuf,
    /// The directory of `admin.conf`, the admin kubeconfig naming `api_server` (for clients in
    /// the lab namespace or a VM); the cluster's PKI stays in its Kind node.
    pub pki_dir: PathBuf,
    /// `v1.35.4`.
    pub kubernetes_version: String,
    /// The `kubectl` built with the control plane (same version).
    pub kubectl: PathBuf,
    /// Where the cluster's own logs go (`kind-create.log`).
    pub log_dir: PathBuf,
}

impl ClusterAccess {
    /// An admin client (from [`ClusterAccess::admin_kubeconfig`]).
    pub async fn client(&self) -> Result<kube::Client, ControlPlaneError> {
        client_from(&self.admin_kubeconfig).await
    }

    /// A client holding only the bootstrap token (what a joining kubelet has).
    pub async fn bootstrap_client(&self) -> Result<kube::Client, ControlPlaneError> {
        client_from(&self.bootstrap_kubeconfig).await
    }

    /// `kubectl --kubeconfig <admin kubeconfig>`, run on the host.
    pub fn kubectl(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.kubectl);
        cmd.arg("--kubeconfig").arg(&self.admin_kubeconfig);
        cmd
    }
}

/// A client from a kubeconfig file (its current context).
pub async fn client_from(path: &Path) -> Result<kube::Client, ControlPlaneError> {
    let err = |message: String| ControlPlaneError::Client {
        path: path.to_path_buf(),
        message,
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| err(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| err(e.to_string()))
}
