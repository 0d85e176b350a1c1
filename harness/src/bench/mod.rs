//! Benchmarks of LocalDNS on this host, in network namespaces of a live LocalDNS
//! ([`crate::localdns_live`], the listeners on `lo`), run by `harness bench localdns` and
//! `harness bench supervisor-idle` (figures in docs/perf.md):
//!
//! * [`localdns`]: cached-query throughput and latency through the node listener, ours with our
//!   NOTRACK table, ours without it, and bare CoreDNS, side by side, with conntrack's entries and
//!   CoreDNS's RSS and CPU;
//! * [`supervisor_idle`]: the supervisor's CPU on an idle node with its hung-CoreDNS queue rule
//!   on and off, and what one look at the listeners' queues costs;
//! * [`host`]: what they need on this host ([`host::require`]) and their lab ([`host::BenchLab`]);
//! * [`procfs`]: a process's CPU time and RSS from `/proc`;
//! * [`error`]: the errors, [`BenchError`].

pub mod error;
pub mod host;
pub mod localdns;
pub mod procfs;
pub mod supervisor_idle;

pub use error::BenchError;
