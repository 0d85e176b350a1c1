//! `unbounded-agent daemon`: acts on the Machina API for this host's Machine — the
//! `MachineOperation`s that target it (`NodeReboot` → managed reboot, `AgentReset` → reset), one
//! at a time through the lifecycle core, with their status written as the API defines it
//! (docs/operations.md).
//!
//! * [`applied`]: at start, the applied config must match its `.sha256` sidecar;
//! * [`select`] (pure): which operations target this machine, which one to run next, which are
//!   past their `ttlSecondsAfterFinished`;
//! * [`status`] (pure): the status of an operation entering `InProgress`, `Complete` or `Failed`;
//! * [`node_watch`] (pure): its Node deleted with `updateStrategy: OnDelete` → repave;
//! * [`renew`]: the token renewed through the TokenRequest API before it expires;
//! * [`run`]: the loop against the API server (list, act, watch until something changes).

pub mod applied;
pub mod error;
pub mod node_watch;
pub mod renew;
pub mod run;
pub mod select;
pub mod status;

pub use error::DaemonError;
pub use run::{Daemon, Settings};
