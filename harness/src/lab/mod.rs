//! The lab network: a network namespace with a bridge, the lab's services bound
//! inside it, and taps for the VMs.
//!
//! ```no_run
//! use harness::lab::{Lab, LabSpec};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let lab = Lab::start(LabSpec::for_test("dns_answers"))?; // lab-<slot+1>, 192.168.<101+slot>.1
//! lab.dns().set_a("web.lab.test", &["10.0.0.1".parse()?], 5)?;
//! lab.http().publish("/coredns/coredns.tgz", std::path::Path::new("/tmp/coredns.tgz"))?;
//! let nic = lab.attach_vm()?;        // tap labtap<n>-0, 192.168.100.10, for the VM runtime
//! println!("{} {}", nic.tap, nic.ip); // labtap<n>-0 192.168.100.10
//! assert_eq!(lab.http().request_count(), 0);
//! lab.shutdown()?;                   // or drop: kills, deletes, checks nothing is left
//! # Ok(()) }
//! ```
//!
//! * Lab `n` (`NEXTEST_TEST_GLOBAL_SLOT + 1` in tests, 0 for `harness lab up`):
//!   namespace `lab-<n>`, bridge `labbr<n>` at `192.168.100.1/24`, taps
//!   `labtap<n>-<k>`; see [`crate::addresses`] for the whole table.
//! * Services run in this process: their sockets are bound by a thread that
//!   entered the namespace with `setns`, and served by a thread of our own
//!   ([`services`]). No helper processes; stopping them closes the sockets.
//! * QEMU runs inside the namespace: [`Lab::command`] / [`VmNic::netns`]
//!   (`ip netns exec lab-<n> qemu-system-x86_64 ...`).
//! * With `LabSpec { control_plane: true, .. }` the lab also runs a Kubernetes cluster, a Kind
//!   cluster wired to its bridge ([`cluster`], [`crate::kind`]); `lab.cluster()` tells how to
//!   reach it.
//! * Offline VMs: [`Lab::block_artifact_server`] cuts one VM off from the artifact server
//!   ("No route to host" on `:8080`, see [`offline`]); the API server and DNS stay reachable.
//! * Ownership: `/run/unbounded-lab/lab-<n>/owner.pid`; every [`Lab::start`]
//!   first sweeps labs whose owner died ([`owner`]). Ctrl-C and SIGTERM tear
//!   live labs down before exiting ([`signals`]).

pub mod cluster;
pub mod dns;
mod dns_server;
pub mod error;
mod guard;
pub mod http;
pub mod keep;
pub mod offline;
pub mod owner;
pub mod record;
mod services;
pub mod signals;

pub use crate::addresses::LabAddrs;
pub use dns::{DnsControl, DnsFailure, DnsQuery};
pub use error::LabError;
pub use guard::{Lab, LabSpec, VmNic};
pub use http::{HttpControl, HttpRequest};
