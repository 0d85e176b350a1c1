//! [`DaemonError`]: what ends the daemon (an operation that fails is written to its status, not
//! returned).

/// The daemon could not go on.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("{what} on {server}: {source}")]
    Api {
        what: String,
        server: String,
        #[source]
        source: kube::Error,
    },
    #[error("the Machine {0} does not exist in the cluster")]
    NoMachine(String),
    #[error(transparent)]
    AppliedConfig(#[from] super::applied::AppliedConfigError),
    #[error("writing {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}
