//! Reaching the lab's Kubernetes cluster (a Kind cluster, [`crate::kind`]) and the objects the
//! harness adds to it, behind the [`ControlPlane`] seam the lab holds.
//!
//! * [`access`]: [`ClusterAccess`], what scenarios use (addresses, CA, token, kubeconfigs,
//!   a `kube::Client`);
//! * [`kubeconfig`]: a kubeconfig (kube's type, written as YAML) naming one cluster, one user, one
//!   context, and a copy naming another server;
//! * [`bootstrap`]: a bootstrap token, its Secret and the bootstrap RBAC kubeadm creates;
//! * [`plane`]: the [`ControlPlane`] trait and its inputs ([`ControlPlaneSpec`]).
//!
//! A lab gets one with `LabSpec { control_plane: true, .. }` and `lab.cluster()`.

pub mod access;
pub mod bootstrap;
pub mod error;
pub mod kubeconfig;
pub mod plane;

pub use access::ClusterAccess;
pub use error::ControlPlaneError;
pub use plane::{ControlPlane, ControlPlaneSpec, KindRecord};
