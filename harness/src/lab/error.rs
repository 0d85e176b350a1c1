//! Errors of the lab network: each names the lab, the thing and the way out.

use std::path::PathBuf;

use agent::exec::CommandFailed;

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error(transparent)]
    Command(#[from] CommandFailed),
    #[error(transparent)]
    Vm(#[from] Box<crate::vm::VmError>),
    #[error(transparent)]
    Netns(#[from] crate::netns::NetnsError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("lab number {0} is out of range (0 for `harness lab up`, 1..=154 for tests)")]
    BadNumber(u32),
    #[error(
        "lab {name} is in use by process {pid} ({cmdline}); stop it with `harness lab down` \
         (lab 0) or kill that process"
    )]
    InUse { name: String, pid: i32, cmdline: String },
    #[error("no free lab number from {from} to {to}: every one is owned by a live process")]
    NoFreeNumber { from: u8, to: u8 },
    #[error("cannot bind the {service} at {addr} inside {netns}: {source}")]
    Bind {
        service: &'static str,
        addr: std::net::SocketAddr,
        netns: String,
        #[source]
        source: std::io::Error,
    },
    #[error("lab {lab} has no room for another VM (at most {max})")]
    TooManyVms { lab: String, max: u8 },
    #[error("bad DNS name {name:?}: {reason}")]
    BadDnsName { name: String, reason: String },
    #[error("bad artifact path {path:?}: {reason}")]
    BadPublishPath { path: String, reason: String },
    #[error(transparent)]
    ControlPlane(#[from] Box<crate::controlplane::ControlPlaneError>),
    /// The lab's Kind cluster could not be created or wired to the lab.
    #[error(transparent)]
    Kind(Box<crate::kind::KindError>),
    #[error("the lab's service thread failed: {0}")]
    Services(String),
    #[error("tearing down {lab} left things behind:\n  {}", .problems.join("\n  "))]
    Leftovers { lab: String, problems: Vec<String> },
}

pub(crate) fn io_err(
    what: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> LabError {
    let path = path.into();
    move |source| LabError::Io { what, path, source }
}
