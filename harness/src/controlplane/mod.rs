//! The lab's Kubernetes control plane: its PKI, kubeconfigs and bootstrap objects, and the
//! components run as processes in the lab namespace behind the [`ControlPlane`] seam.
//!
//! * [`pki`]: the cluster CA, the API server's serving and kubelet-client
//!   certificates, service-account keys, the front-proxy CA and client, and the
//!   kubeconfigs of the admin, kube-controller-manager, kube-scheduler and a
//!   bootstrapping kubelet, written into one directory (keys 0600);
//! * [`kubeconfig`]: a kubeconfig (kube's type, written as YAML) naming one cluster, one user, one
//!   context, and a copy naming another server;
//! * [`bootstrap`]: a bootstrap token, its Secret and the bootstrap RBAC kubeadm creates;
//! * [`plane`]: the [`ControlPlane`] trait and its inputs; [`local`]: the process-based
//!   implementation ([`ProcessControlPlane`]); [`flags`], [`cluster_dns`]: the components'
//!   command lines and the cluster DNS Corefile; [`process`], [`ready`], [`forward`]: one
//!   process, readiness checks, the API server's host loopback forwarder;
//! * [`access`]: [`ClusterAccess`], what scenarios use (addresses, CA, token, kubeconfigs,
//!   a `kube::Client`).
//!
//! A lab gets one with `LabSpec { control_plane: true, .. }` and `lab.cluster()`.

pub mod access;
pub mod bootstrap;
pub mod cluster_dns;
pub mod error;
pub mod flags;
pub mod forward;
pub mod kubeconfig;
pub mod local;
pub mod pki;
pub mod plane;
pub mod process;
pub mod ready;

pub use access::ClusterAccess;
pub use error::ControlPlaneError;
pub use local::ProcessControlPlane;
pub use plane::{ControlPlane, ControlPlaneSpec};
