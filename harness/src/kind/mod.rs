//! The lab's Kind cluster: the container engine its node containers run in (`engine`) and what
//! the harness reads through the engine's API (`engine_api`), the cluster Kind's CLI creates from
//! the lab's node image (`cluster`), wired to a lab as its control plane (`plane`), its node
//! saved into a checkpoint and restored from one (`saved`), and its kube-proxy on a joined VM
//! (`node_proxy`).

pub mod cluster;
pub mod cluster_dns_probe;
pub mod engine;
pub mod engine_api;
pub mod node_proxy;
pub mod plane;
pub mod saved;

pub use cluster::{KindCluster, KindError};
pub use engine::{Engine, EngineError, EngineKind};
pub use plane::{KindControlPlane, KindParts};
