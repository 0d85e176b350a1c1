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
//! * [`drift`] (pure): the config its Machine and configuration ask for against the applied one;
//! * [`act_on_drift`]: `apply` in place or a repave when they differ, reported in the Machine's status;
//! * [`host_network`]: LocalDNS's link, addresses and nft table restored when removed by hand
//!   (condition `HostNetwork` on the Machine);
//! * [`watch_event`] (pure): what a watch event means for the loop (an expired version is waited
//!   out, not retried at once);
//! * [`run`]: the loop against the API server (list, act, watch until something changes).

pub mod act_on_drift;
pub mod applied;
pub mod drift;
pub mod error;
pub mod host_network;
pub mod node_watch;
pub mod renew;
pub mod run;
pub mod select;
pub mod source_policy;
pub mod status;
pub mod watch_event;

pub use error::DaemonError;
pub use run::{Daemon, Settings};
