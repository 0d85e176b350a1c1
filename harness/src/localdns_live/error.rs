//! Errors of a live LocalDNS: each names the namespace, file or process, and the way out.

use std::path::PathBuf;
use std::time::Duration;

use agent::exec::CommandFailed;

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(transparent)]
    Command(#[from] CommandFailed),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("starting `{command}`: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("watching process {pid}: {source}")]
    Wait {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("entering network namespace {netns} (needs root): {source}")]
    Setns {
        netns: String,
        #[source]
        source: nix::Error,
    },
    /// The guest tests' CoreDNS is missing: they run in a lab VM, which is handed it.
    #[error("{what}: {}", super::binaries::RUN_IN_A_VM)]
    NotInAGuest { what: String },
    #[error(
        "no LocalDNS supervisor {} beside this program (looked for {}): build it with \
         `cargo build -p agent --bins` into the same target directory and profile",
        super::SUPERVISOR_BINARY,
        .looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    MissingSupervisor { looked: Vec<PathBuf> },
    #[error("the live lab's agent config: {0}")]
    Config(#[from] agent::validate::Problems),
    #[error("the live lab's LocalDNS goal: {0}")]
    Goal(#[from] agent::goal::GoalError),
    #[error("rendering the live lab's Corefile: {0}")]
    Corefile(#[from] agent::corefile::CorefileError),
    #[error(
        "agent::hostnet::apply in namespace {netns}: {source}; {}",
        super::binaries::RUN_IN_A_VM
    )]
    Apply {
        netns: String,
        #[source]
        source: Box<agent::hostnet::ApplyError>,
    },
    #[error("observing the localdns link: {0}")]
    Link(Box<agent::hostnet::link::LinkError>),
    #[error(
        "after agent::hostnet::apply, the localdns link is not a dummy link with both listeners: {observed}"
    )]
    NotADummyLink { observed: String },
    #[error("timed out after {timeout:?} waiting until {what}\n{logs}")]
    Timeout {
        what: String,
        timeout: Duration,
        logs: String,
    },
    #[error("GET http://{addr}/metrics: {source}")]
    Metrics {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<agent::hostnet::link::LinkError> for LiveError {
    fn from(e: agent::hostnet::link::LinkError) -> LiveError {
        LiveError::Link(Box::new(e))
    }
}

pub(crate) fn io_err(
    what: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> LiveError {
    let path = path.into();
    move |source| LiveError::Io { what, path, source }
}
