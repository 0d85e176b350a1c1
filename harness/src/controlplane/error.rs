//! Errors of the control plane: each names the component, what was checked and where its log is.

use std::path::PathBuf;
use std::time::Duration;

use agent::exec::CommandFailed;

use super::pki::PkiError;

#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    /// A cached image the control plane runs from is not built.
    #[error("{0}")]
    MissingImage(String),
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(transparent)]
    Command(#[from] CommandFailed),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("starting {component} ({program}): {source}")]
    Spawn {
        component: &'static str,
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{component} exited ({status}) before it was ready; the end of {log}:\n{tail}")]
    Exited {
        component: &'static str,
        status: String,
        log: PathBuf,
        tail: String,
    },
    #[error("{component} was not ready within {timeout:?}: {check} kept failing (last: {last}); {log}")]
    NotReady {
        component: &'static str,
        check: String,
        timeout: Duration,
        last: String,
        /// Where its log is and how it ends.
        log: String,
    },
    #[error("the API server's host forwarder cannot listen on 127.0.0.1: {0}")]
    Forwarder(#[source] std::io::Error),
    #[error("entering the lab namespace {netns}: {message}")]
    Netns { netns: String, message: String },
    #[error("a Kubernetes client from {path}: {message}")]
    Client { path: PathBuf, message: String },
}

pub(crate) fn io_err(
    what: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> ControlPlaneError {
    let path = path.into();
    move |source| ControlPlaneError::Io { what, path, source }
}
