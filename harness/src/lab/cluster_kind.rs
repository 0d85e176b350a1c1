//! [`ClusterKind`]: what runs a lab's Kubernetes cluster, chosen by `LAB_CLUSTER` (Kind unless it
//! says `processes`).

/// `LAB_CLUSTER`: `kind` (the default) or `processes`; `harness lab up --cluster` and the
/// scenarios read it.
pub const CLUSTER_ENV: &str = "LAB_CLUSTER";

/// What runs a lab's cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ClusterKind {
    /// A Kind cluster ([`crate::kind::KindControlPlane`]): the lab's default.
    #[default]
    Kind,
    /// The control plane's processes in the lab namespace ([`crate::controlplane`]).
    Processes,
}

/// A `LAB_CLUSTER` value that names neither.
#[derive(Debug, thiserror::Error)]
#[error("{CLUSTER_ENV}={0:?}: it is `kind` (the default) or `processes`")]
pub struct UnknownClusterKind(pub String);

impl ClusterKind {
    /// From `LAB_CLUSTER` (unset or empty: [`ClusterKind::Kind`]).
    pub fn from_env() -> Result<ClusterKind, UnknownClusterKind> {
        ClusterKind::parse(std::env::var(CLUSTER_ENV).ok().as_deref())
    }

    /// From a `LAB_CLUSTER` value.
    pub fn parse(value: Option<&str>) -> Result<ClusterKind, UnknownClusterKind> {
        match value.map(str::trim) {
            None | Some("") | Some("kind") => Ok(ClusterKind::Kind),
            Some("processes") => Ok(ClusterKind::Processes),
            Some(other) => Err(UnknownClusterKind(other.to_string())),
        }
    }

    /// Whether it is a Kind cluster (`LabSpec::kind_cluster`).
    pub fn is_kind(self) -> bool {
        self == ClusterKind::Kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_is_the_default_processes_is_asked_for_and_anything_else_is_named() {
        assert_eq!(ClusterKind::parse(None).unwrap(), ClusterKind::Kind);
        assert_eq!(ClusterKind::parse(Some(" ")).unwrap(), ClusterKind::Kind);
        assert_eq!(ClusterKind::parse(Some("kind")).unwrap(), ClusterKind::Kind);
        assert_eq!(
            ClusterKind::parse(Some("processes")).unwrap(),
            ClusterKind::Processes
        );
        let err = ClusterKind::parse(Some("k3s")).unwrap_err().to_string();
        assert!(
            err.contains("LAB_CLUSTER=\"k3s\"") && err.contains("processes"),
            "{err}"
        );
    }
}
