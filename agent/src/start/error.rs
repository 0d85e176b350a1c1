//! Why `start` stopped; each variant names what was wrong and where.

use std::path::PathBuf;

use crate::artifact::ArtifactError;
use crate::exec::CommandFailed;
use crate::goal::GoalError;
use crate::goal::facts::GatherError;
use crate::hostnet::ApplyError;
use crate::machine::machinectl::MachineError;
use crate::render::WriteError;

use super::plan::PlanError;
use crate::install_state::StateError;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid config {path}:\n{problems}")]
    InvalidConfig { path: PathBuf, problems: String },
    #[error("cannot read config {path}: {source}")]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("preflight failed; nothing was changed:\n{report}")]
    Preflight { report: String },
    #[error(transparent)]
    State(#[from] StateError),
    #[error("cannot read the host facts: {0}")]
    Gather(#[from] GatherError),
    #[error("cannot resolve the goal state: {0}")]
    Goal(#[from] GoalError),
    #[error("{what}: {source}")]
    Artifact {
        what: String,
        #[source]
        source: ArtifactError,
    },
    #[error(transparent)]
    Command(#[from] CommandFailed),
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error("cannot apply the LocalDNS host network: {0}")]
    HostNetwork(#[from] ApplyError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("cannot write a unit: {0}")]
    UnitValue(#[from] crate::render::unit_value::UnitValueError),
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "container image {reference} is not listed by `ctr -n k8s.io images ls` after importing {archive}; \
         the archive's index.json must name it (annotation io.containerd.image.name or a full \
         org.opencontainers.image.ref.name)"
    )]
    ImageNotImported { reference: String, archive: String },
}

/// Shorthand for [`StartError::Artifact`].
pub fn artifact(what: impl Into<String>) -> impl FnOnce(ArtifactError) -> StartError {
    let what = what.into();
    move |source| StartError::Artifact { what, source }
}
