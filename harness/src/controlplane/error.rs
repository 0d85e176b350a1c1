//! Errors of reaching the lab's cluster and of what the harness does around it.

use std::path::PathBuf;

use agent::exec::CommandFailed;

#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    /// A cached image the control plane runs from is not built.
    #[error("{0}")]
    MissingImage(String),
    #[error(transparent)]
    Command(#[from] CommandFailed),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("entering the lab namespace {netns}: {message}")]
    Netns { netns: String, message: String },
    #[error("a Kubernetes client from {path}: {message}")]
    Client { path: PathBuf, message: String },
}
