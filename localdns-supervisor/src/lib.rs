//! The LocalDNS supervisor: runs CoreDNS inside the machine, checks its health and reports to systemd
//! (docs/design.md §7). The program in the machine: the agent binary runs it when started under
//! its name (`agent::machine::supervisor_entry`), and `agent/src/bin/unbounded-localdns-supervisor.rs`
//! is its thin entry point for tests. It uses `node-base` (commands, files, sockets) and
//! `localdns` (the Corefile's server blocks) and nothing of the agent.

pub mod alive;
pub mod coredns;
pub mod failures;
pub mod fallback;
pub mod last_words;
pub mod metrics_endpoint;
pub mod notify;
pub mod oom_score;
pub mod probe;
pub mod reload;
pub mod restart_bridge;
pub mod run;
pub mod settings;
pub mod spare;
pub mod standby;
pub mod stuck;
pub mod tally;

pub use coredns::{Outcome, SuperviseError};
pub use failures::{FailureWindow, Verdict};
pub use run::supervise;
pub use settings::{Settings, SettingsError};
