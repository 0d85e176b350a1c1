//! Errors of the LocalDNS benchmarks: what is missing and how to get it, or which step failed.

use std::path::PathBuf;

use agent::exec::CommandFailed;

use crate::localdns_live::LiveError;

/// A prerequisite of a benchmark that this host lacks, and how to get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub what: String,
    pub fix: String,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.fix)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(
        "`harness bench {bench}` cannot run on this host; missing:\n  {}",
        .missing.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  ")
    )]
    Missing {
        bench: &'static str,
        missing: Vec<Missing>,
    },
    #[error(transparent)]
    Live(#[from] LiveError),
    #[error(transparent)]
    Command(#[from] CommandFailed),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `/proc` file or a tool's output that does not read as expected.
    #[error("{source_of}: {why}")]
    Unexpected { source_of: String, why: String },
    #[error("sysconf(_SC_CLK_TCK) returned {0}")]
    ClockTicks(libc::c_long),
    #[error("{signal} to {what} (pid {pid}): {source}")]
    Signal {
        signal: nix::sys::signal::Signal,
        what: &'static str,
        pid: u32,
        #[source]
        source: nix::Error,
    },
    #[error("the supervisor sent no READY=1 within 60 s (it sent {seen:?})\n{logs}")]
    NotReady { seen: Vec<String>, logs: String },
    #[error("the supervisor did not exit within 30 s of SIGTERM\n{logs}")]
    NotExited { logs: String },
    #[error("{what} did not answer {name} on {listener} within 60 s: {why}\n{logs}")]
    NoAnswer {
        what: &'static str,
        name: &'static str,
        listener: String,
        why: String,
        logs: String,
    },
    /// The node listener is not held by the process the round measures.
    #[error("{0}")]
    Listener(String),
    #[error("a {0} thread panicked")]
    Panicked(&'static str),
    #[error("reading the listeners' queues: {0}")]
    Sockets(String),
    #[error("round {setup:?}: {source}")]
    Round {
        setup: &'static str,
        #[source]
        source: Box<BenchError>,
    },
}

pub(crate) fn io_err(
    what: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> BenchError {
    let path = path.into();
    move |source| BenchError::Io { what, path, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_prerequisites_are_listed_each_with_its_fix() {
        let e = BenchError::Missing {
            bench: "localdns",
            missing: vec![
                Missing {
                    what: "`conntrack`".into(),
                    fix: "install conntrack".into(),
                },
                Missing {
                    what: "root".into(),
                    fix: "run it as root".into(),
                },
            ],
        };
        assert_eq!(
            e.to_string(),
            "`harness bench localdns` cannot run on this host; missing:\n  \
             `conntrack`: install conntrack\n  root: run it as root"
        );
    }
}
