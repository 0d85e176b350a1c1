//! The lab's Kubernetes control plane: its PKI, kubeconfigs and bootstrap objects.
//!
//! * [`pki`]: the cluster CA, the API server's serving and kubelet-client
//!   certificates, service-account keys, the front-proxy CA and client, and the
//!   kubeconfigs of the admin, kube-controller-manager, kube-scheduler and a
//!   bootstrapping kubelet, written into one directory (keys 0600);
//! * [`kubeconfig`]: a kubeconfig (YAML) naming one cluster, one user, one context;
//! * [`bootstrap`]: a bootstrap token, its Secret and the bootstrap RBAC kubeadm creates.

pub mod bootstrap;
pub mod kubeconfig;
pub mod pki;
