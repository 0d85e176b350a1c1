//! The lab's Kubernetes cluster: the control plane a lab starts when
//! `LabSpec.control_plane` is set — a Kind cluster with `LabSpec.kind_cluster`
//! ([`crate::kind`]), else processes in its namespace ([`crate::controlplane`], the table
//! below) — and the routes to each VM's pod CIDR.
//!
//! | what | where |
//! |---|---|
//! | API server | `https://192.168.100.1:6443`; on the host `https://127.0.0.1:<16443+n>` (a forwarder) |
//! | admin kubeconfig for the host | `$LAB_RUN_DIR/lab-<n>/kubeconfig` |
//! | PKI, etcd data, Corefile | `$LAB_RUN_DIR/lab-<n>/control-plane/` |
//! | logs (`etcd.log`, `kube-apiserver.log`, ...) | `<lab log dir>/control-plane/` |
//! | cluster DNS | `10.96.0.10:53` on the namespace's `lo` |
//! | pod CIDR of VM `k` | `10.244.<k>.0/24` via `192.168.100.<10+k>` |

use std::path::{Path, PathBuf};
use std::process::Command;

use super::addr::LabAddrs;
use super::error::LabError;
use crate::cache::Cache;
use crate::controlplane::{ControlPlane, ControlPlaneError, ControlPlaneSpec, ProcessControlPlane};
use crate::error_chain::Chain;
use crate::images::{coredns, kind_node, kind_tool, kubernetes};

/// The images a control plane runs from, found before the lab is made.
#[derive(Clone, Debug)]
pub struct ClusterImages {
    kubernetes: kubernetes::KubernetesArtifact,
    coredns: PathBuf,
    /// A Kind cluster's `kind` and node image; `None`: the processes control plane.
    kind: Option<crate::kind::KindParts>,
}

fn missing(err: impl std::error::Error + 'static) -> LabError {
    LabError::ControlPlane(Box::new(ControlPlaneError::MissingImage(format!(
        "the lab's control plane cannot start: {}",
        Chain(&err)
    ))))
}

/// Finds the cached Kubernetes binaries and CoreDNS (with `kind`, `kind` and the Kind node
/// image too); fails at once naming `harness images build` when one is missing.
pub fn images(kind: bool) -> Result<ClusterImages, LabError> {
    let cache = Cache::open().map_err(missing)?;
    let kind = match kind {
        false => None,
        true => Some(crate::kind::KindParts {
            tool: kind_tool::require(&cache).map_err(missing)?,
            image: kind_node::require(&cache).map_err(missing)?,
        }),
    };
    Ok(ClusterImages {
        kubernetes: kubernetes::require(&cache).map_err(missing)?,
        coredns: coredns::require(&cache).map_err(missing)?.cluster_binary,
        kind,
    })
}

/// `$LAB_RUN_DIR/lab-<n>/kubeconfig`: the admin kubeconfig usable from the host.
pub fn admin_kubeconfig(run_dir: &Path) -> PathBuf {
    run_dir.join("kubeconfig")
}

/// The Machina CRDs installed in every lab cluster: `<repo>/deploy/crd`.
pub fn crd_dir() -> PathBuf {
    crate::repo::root().join("deploy").join("crd")
}

/// The agent daemon's RBAC and admission policy applied in every lab cluster: `<repo>/deploy/rbac`.
pub fn rbac_dir() -> PathBuf {
    crate::repo::root().join("deploy").join("rbac")
}

/// `<run dir>/control-plane`: the control plane's state (PKI, etcd data, Corefile).
pub fn state_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("control-plane")
}

/// Starts the control plane of lab `addrs` (a Kind cluster when `images` has Kind's parts);
/// with `restore`, from that saved state (a checkpoint's, [`crate::checkpoint`]: a copy of the
/// processes' PKI and etcd data, or a Kind node restored from it) instead of a new cluster.
pub fn start(
    images: &ClusterImages,
    addrs: &LabAddrs,
    run_dir: &Path,
    log_dir: &Path,
    restore: Option<&Path>,
) -> Result<Box<dyn ControlPlane>, LabError> {
    let state = state_dir(run_dir);
    // A Kind cluster restores its node from the saved files in place (`crate::kind::saved`).
    if let (Some(saved), None) = (restore, &images.kind) {
        crate::checkpoint::copy_tree(saved, &state).map_err(|e| {
            LabError::ControlPlane(Box::new(ControlPlaneError::Netns {
                netns: addrs.netns(),
                message: format!(
                    "restoring the control plane's state from {}: {e}",
                    saved.display()
                ),
            }))
        })?;
    }
    let spec = ControlPlaneSpec {
        addrs: *addrs,
        state_dir: state,
        log_dir: log_dir.join("control-plane"),
        admin_kubeconfig: admin_kubeconfig(run_dir),
        bin_dir: images.kubernetes.bin_dir.clone(),
        kubernetes_version: format!("v{}", images.kubernetes.version),
        coredns: images.coredns.clone(),
        crd_dir: crd_dir(),
        rbac_dir: rbac_dir(),
        timeout: ControlPlaneSpec::default_timeout(),
    };
    if let Some(parts) = &images.kind {
        let plane = crate::kind::KindControlPlane::start(&spec, parts, restore)
            .map_err(|e| LabError::Kind(Box::new(e)))?;
        return Ok(Box::new(plane));
    }
    let plane = ProcessControlPlane::start(&spec).map_err(|e| LabError::ControlPlane(Box::new(e)))?;
    Ok(Box::new(plane))
}

/// The pod CIDR of VM `k`, `10.244.<k>.0/24`.
pub fn pod_cidr(k: u8) -> String {
    format!("10.244.{k}.0/24")
}

/// Routes VM `k`'s pod CIDR to the VM's address inside the lab namespace (idempotent), so
/// the cluster DNS and the API server answer pods.
pub fn route_pod_cidr(addrs: &LabAddrs, k: u8) -> Result<(), LabError> {
    let via = addrs
        .vm_ip(k)
        .ok_or(LabError::TooManyVms {
            lab: addrs.netns(),
            max: super::addr::MAX_VMS,
        })?
        .to_string();
    agent::exec::run(Command::new("ip").args([
        "-n",
        &addrs.netns(),
        "route",
        "replace",
        &pod_cidr(k),
        "via",
        &via,
    ]))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_cidr_follows_the_vm_index() {
        assert_eq!(pod_cidr(0), "10.244.0.0/24");
        assert_eq!(pod_cidr(7), "10.244.7.0/24");
        assert_eq!(
            admin_kubeconfig(Path::new("/run/unbounded-lab/lab-0")),
            Path::new("/run/unbounded-lab/lab-0/kubeconfig")
        );
    }
}
