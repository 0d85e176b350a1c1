//! The lab's Kubernetes cluster: the Kind cluster a lab starts when `LabSpec.control_plane` is
//! set ([`crate::kind`]), and the routes to each VM's pod CIDR.
//!
//! | what | where |
//! |---|---|
//! | API server | `https://192.168.100.3:6443` (the Kind node on the lab's bridge); on the host `https://127.0.0.1:<port Kind chose>` |
//! | admin kubeconfig for the host | `$LAB_RUN_DIR/lab-<n>/kubeconfig` |
//! | Kind's config, the objects applied | `$LAB_RUN_DIR/lab-<n>/control-plane/` |
//! | Kind's output | `<lab log dir>/control-plane/kind-create.log` |
//! | cluster DNS | `10.96.0.10`, the `kube-dns` Service |
//! | pod CIDR of VM `k` | `10.244.<k>.0/24` via `192.168.100.<10+k>` |

use std::path::{Path, PathBuf};
use std::process::Command;

use super::error::LabError;
use crate::addresses::LabAddrs;
use crate::cache::Cache;
use crate::controlplane::{ControlPlane, ControlPlaneError, ControlPlaneSpec};
use crate::images::{kind_node, kind_tool, kubernetes};
use agent::error_chain::Chain;

/// The images the lab's cluster runs from, found before the lab is made.
#[derive(Clone, Debug)]
pub struct ClusterImages {
    /// The Kubernetes binaries (the host's `kubectl`).
    kubernetes: kubernetes::KubernetesArtifact,
    /// `kind` and the Kind node image.
    kind: crate::kind::KindParts,
}

fn missing(err: impl std::error::Error + 'static) -> LabError {
    LabError::ControlPlane(Box::new(ControlPlaneError::MissingImage(format!(
        "the lab's cluster cannot start: {}",
        Chain(&err)
    ))))
}

/// Finds the cached Kubernetes binaries, `kind` and the Kind node image; fails at once naming
/// `harness images build` when one is missing.
pub fn images() -> Result<ClusterImages, LabError> {
    let cache = Cache::open().map_err(missing)?;
    Ok(ClusterImages {
        kind: crate::kind::KindParts {
            tool: kind_tool::require(&cache).map_err(missing)?,
            image: kind_node::require(&cache).map_err(missing)?,
        },
        kubernetes: kubernetes::require(&cache).map_err(missing)?,
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

/// `<run dir>/control-plane`: the cluster's state on the host (Kind's kubeconfig, the engine's
/// config, the objects applied).
pub fn state_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("control-plane")
}

/// Starts lab `addrs`'s Kind cluster; with `restore`, its node restored from that saved node (a
/// checkpoint's, [`crate::kind::saved`]) instead of a new cluster.
pub fn start(
    images: &ClusterImages,
    addrs: &LabAddrs,
    run_dir: &Path,
    log_dir: &Path,
    restore: Option<&Path>,
) -> Result<Box<dyn ControlPlane>, LabError> {
    let spec = ControlPlaneSpec {
        addrs: *addrs,
        state_dir: state_dir(run_dir),
        log_dir: log_dir.join("control-plane"),
        admin_kubeconfig: admin_kubeconfig(run_dir),
        bin_dir: images.kubernetes.bin_dir.clone(),
        kubernetes_version: format!("v{}", images.kubernetes.version),
        crd_dir: crd_dir(),
        rbac_dir: rbac_dir(),
        timeout: ControlPlaneSpec::default_timeout(),
    };
    let plane = crate::kind::KindControlPlane::start(&spec, &images.kind, restore)
        .map_err(|e| LabError::Kind(Box::new(e)))?;
    Ok(Box::new(plane))
}

/// Routes VM `k`'s pod CIDR to the VM's address inside the lab namespace (idempotent), so
/// the cluster DNS and the API server answer pods.
pub fn route_pod_cidr(addrs: &LabAddrs, k: u8) -> Result<(), LabError> {
    let via = addrs
        .vm_ip(k)
        .ok_or(LabError::TooManyVms {
            lab: addrs.netns(),
            max: crate::addresses::MAX_VMS,
        })?
        .to_string();
    agent::exec::run(Command::new("ip").args([
        "-n",
        &addrs.netns(),
        "route",
        "replace",
        &crate::addresses::pod_cidr(k),
        "via",
        &via,
    ]))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_kubeconfig_is_in_the_labs_run_directory() {
        assert_eq!(
            admin_kubeconfig(Path::new("/run/unbounded-lab/lab-0")),
            Path::new("/run/unbounded-lab/lab-0/kubeconfig")
        );
    }
}
