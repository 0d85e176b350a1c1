//! Looking at a running lab from any process (the owner or `harness lab status|logs` in another
//! terminal): its VMs are reached through their run directories' guest agents, its cluster
//! through the lab's kubectl and admin kubeconfig ([`crate::lab::record`]).
//!
//! * [`view`]: the lab as found on disk — owner, record, VMs;
//! * [`status`]: each VM's Node, slot, `localdns.service` and listeners, as text or JSON;
//! * [`logs`]: everything a bug report needs in one directory, with an index.

pub mod health;
pub mod logs;
pub mod status;
pub mod view;

pub use view::{LabView, VmView};
