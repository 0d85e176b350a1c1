//! The unbounded node agent: runs a Kubernetes node in a systemd-nspawn machine,
//! with a LocalDNS cache (CoreDNS) in front of the node's and the pods' DNS.

pub mod config;
pub mod exec;
