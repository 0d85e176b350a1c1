//! The unbounded node agent: runs a Kubernetes node in a systemd-nspawn machine,
//! with a LocalDNS cache (CoreDNS) in front of the node's and the pods' DNS.

pub mod artifact;
pub mod clap_help;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod goal;
pub mod guest_test;
pub mod hostnet;
pub mod install_state;
pub mod lifecycle;
pub mod machina;
pub mod machine;
pub mod manual_bootstrap;
pub mod names;
pub mod node_status;
pub mod paths;
pub mod preflight;
pub mod progress;
pub mod render;
pub mod service_account_token;
pub mod source_digest;
pub mod start;
pub mod test_binary;
pub mod validate;

// The workspace crates below the agent, under the names the agent's modules use.
pub use localdns::{corefile, zones};
pub use localdns_supervisor as supervisor;
pub use node_base::{error_chain, exec, files, sockets};
