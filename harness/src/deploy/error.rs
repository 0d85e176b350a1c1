//! [`DeployError`]: what went wrong deploying a node, with the evidence directory when the VM
//! was touched.

use std::path::PathBuf;

use crate::node_config::NodeConfigError;
use crate::vm::{ExitKind, VmError};

#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error(
        "the agent binary {path} is missing: build it with `{fix}` \
         (scripts/scenario.sh builds it before running scenarios)"
    )]
    MissingAgentBinary { path: PathBuf, fix: String },
    #[error(
        "the agent binary {path} was built from other sources than this checkout's (its sources' \
         sha256: {built}; the checkout's: {checkout}; the most recently changed source: {newest}): \
         rebuild it with `{fix}` (scripts/scenario.sh builds it before running scenarios)"
    )]
    StaleAgentBinary {
        path: PathBuf,
        built: String,
        checkout: String,
        newest: PathBuf,
        fix: String,
    },
    #[error("reading the agent's sources under {repo}: {why}")]
    AgentSources { repo: PathBuf, why: String },
    #[error("lab {lab} has no control plane: start it with `LabSpec {{ control_plane: true, .. }}`")]
    NoControlPlane { lab: String },
    #[error("lab {lab} has no VM on tap {tap} (VM {vm})")]
    NotInLab { lab: String, vm: String, tap: String },
    #[error(transparent)]
    Config(#[from] NodeConfigError),
    #[error(transparent)]
    Machine(#[from] super::machine::MachineError),
    #[error("deploying node {node}: {doing}: {source}\nevidence in {evidence}")]
    Vm {
        node: String,
        doing: String,
        #[source]
        source: Box<VmError>,
        evidence: PathBuf,
    },
    #[error(transparent)]
    Start(Box<StartFailed>),
}

impl DeployError {
    /// Where the evidence of this failure went, if the VM was touched.
    pub fn evidence(&self) -> Option<&PathBuf> {
        match self {
            DeployError::Vm { evidence, .. } => Some(evidence),
            DeployError::Start(failed) => Some(&failed.evidence),
            _ => None,
        }
    }
}

/// `start` exited non-zero or ran out of time.
#[derive(Debug, thiserror::Error)]
#[error(
    "node {node}: `{command}` {how} after {took:.1?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\nevidence in {}",
    evidence.display()
)]
pub struct StartFailed {
    pub node: String,
    pub command: String,
    /// "failed with exit status N" or "timed out (limit ...)".
    pub how: String,
    pub status: ExitKind,
    pub took: std::time::Duration,
    pub stdout: String,
    pub stderr: String,
    pub evidence: PathBuf,
}
