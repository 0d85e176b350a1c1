//! Why `manual-bootstrap` fails: each error is one line, naming what to fix.

/// A failed `manual-bootstrap`.
#[derive(Debug, thiserror::Error)]
pub enum ManualBootstrapError {
    /// A flag or the machine argument has a bad value.
    #[error("{flag} {value:?}: {reason}")]
    Flag {
        flag: &'static str,
        value: String,
        reason: String,
    },
    /// No kubeconfig (or in-cluster config) could be loaded.
    #[error("cannot load a kubeconfig (KUBECONFIG or ~/.kube/config): {0}")]
    Kubeconfig(String),
    /// The kubeconfig's cluster has no CA certificate to hand to the node.
    #[error(
        "the kubeconfig's cluster {server} has no certificate-authority(-data): the node needs the cluster CA"
    )]
    NoClusterCa { server: String },
    /// The API server did not answer.
    #[error("cannot reach the API server {server}: {message}")]
    Unreachable { server: String, message: String },
    /// The API server refused a request.
    #[error("{what}: {message} (API server {server})")]
    Api {
        what: String,
        server: String,
        message: String,
    },
    #[error("machine {0:?} not found")]
    MachineNotFound(String),
    #[error("{kind} {name:?} not found (spec.configurationRef of machine {machine:?})")]
    ConfigurationNotFound {
        kind: &'static str,
        name: String,
        machine: String,
    },
    /// The cluster DNS address cannot be found.
    #[error("the cluster DNS address is unknown: {0}")]
    ClusterDns(String),
    #[error("generating a bootstrap token: {0}")]
    Random(getrandom::Error),
    /// The assembled config fails the agent's own validation.
    #[error("the agent config for machine {machine:?} is not valid: {problems}")]
    InvalidConfig { machine: String, problems: String },
    /// Rendering what the command prints failed.
    #[error("rendering {0}")]
    Render(String),
}
