//! A live LocalDNS in network namespaces: the node namespace holds both listener /32s and our nft
//! table; a peer namespace serves the test zone `example.test` (the node's upstream) and another
//! plays cluster DNS for `cluster.local`, both with the real CoreDNS and its `file` plugin. The
//! supervisor runs the real CoreDNS with the Corefile and environment file the agent renders.
//!
//! Two users: the guest tests `harness/tests/guest_localdns_live.rs` and
//! `harness/tests/guest_localdns_notrack.rs`, in a lab VM on Debian's kernel, where the listeners
//! live on the `localdns` dummy link made by `agent::hostnet::apply` ([`Listeners::DummyLink`]);
//! and the benchmarks of [`crate::bench`] on this host, whose kernel may lack dummy links
//! ([`Listeners::Loopback`]).
//!
//! * [`lab`]: [`Lab`], the namespaces, links, table and peer DNS servers, and the supervisor's
//!   environment;
//! * [`netns`]: [`Netns`], a named network namespace, and [`BackHome`];
//! * [`process`]: [`Proc`], a logged process killed on drop;
//! * [`dns`]: one query ([`query`]) and the metrics endpoint ([`metrics`], [`metric_sum`]);
//! * [`notify`]: [`NotifySocket`], the supervisor's `NOTIFY_SOCKET`;
//! * [`binaries`]: where the real CoreDNS and the supervisor are found;
//! * [`error`]: the errors, [`LiveError`].
//!
//! [`Lab::build`] moves the calling thread into the node namespace, and dropping the [`Lab`]
//! kills every process `ip netns pids` finds there: a caller on its process's main thread goes
//! home first ([`BackHome`]) or works on another thread.

pub mod binaries;
pub mod dns;
pub mod error;
pub mod lab;
pub mod netns;
pub mod notify;
pub mod process;

use std::net::Ipv4Addr;

pub use binaries::{COREDNS_ENV, SUPERVISOR_BINARY, guest_coredns, supervisor_binary};
pub use dns::{Answer, QueryError, metric_sum, metric_sum_with_label, metrics, query};
pub use error::LiveError;
pub use lab::{Lab, Listeners, config, config_text};
pub use netns::{BackHome, Netns};
pub use notify::NotifySocket;
pub use process::Proc;

/// The node listener.
pub const NODE: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 10);
/// The cluster listener.
pub const CLUSTER: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 11);
/// Node side of the node–upstream link.
pub const NODE_TO_UPSTREAM: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 1);
/// Upstream side of the node–upstream link: the upstream DNS server.
pub const UPSTREAM: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 2);
/// Node side of the node–cluster DNS link.
pub const NODE_TO_CLUSTER: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 5);
/// Cluster DNS side of the node–cluster DNS link: the cluster DNS server.
pub const CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 6);
/// The metrics address of LocalDNS's CoreDNS (the agent config's `MetricsAddress`).
pub const METRICS: &str = "10.55.0.1:9253";
/// The metrics address of the upstream server.
pub const UPSTREAM_METRICS: &str = "10.55.0.2:9153";
