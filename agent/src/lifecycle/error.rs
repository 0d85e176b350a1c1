//! Why a lifecycle operation stopped; each variant names what was wrong and where.

use super::lock::LockError;
use super::plan::Refusal;
use super::repave_state::RepaveStateError;
use crate::names::Slot;
use crate::start::StartError;

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Step(#[from] StartError),
    #[error(transparent)]
    RepaveState(#[from] RepaveStateError),
    #[error("`{op}` needs the config to act on: --config FILE")]
    NeedsConfig { op: &'static str },
    #[error(
        "the repave to {to} recorded its config as sha256 {sha256}, and no config found matches it \
         (looked at {looked_at}); run `unbounded-agent repave --config FILE` with that config"
    )]
    RepaveConfigLost {
        to: Slot,
        sha256: String,
        looked_at: String,
    },
    #[error("reset could not remove everything (exit 1):\n{report}")]
    ResetIncomplete { report: String },
    #[error("the machine {slot} still has the boot id {boot_id} it had before; it did not start anew")]
    SameBootId { slot: Slot, boot_id: String },
    #[error(
        "the repave to {to} failed in phase {phase}: {cause}\nthe node was returned to {from}, \
         which runs again; {to} was removed"
    )]
    RolledBack {
        from: Slot,
        to: Slot,
        phase: &'static str,
        cause: String,
    },
    #[error(
        "the repave to {to} failed in phase {phase}: {cause}\nreturning the node to {from} failed \
         too: {rollback}\nrun `unbounded-agent repave` to try the repave again"
    )]
    RollbackFailed {
        from: Slot,
        to: Slot,
        phase: &'static str,
        cause: String,
        rollback: String,
    },
}

impl From<crate::render::WriteError> for LifecycleError {
    fn from(e: crate::render::WriteError) -> Self {
        LifecycleError::Step(e.into())
    }
}

impl From<crate::exec::CommandFailed> for LifecycleError {
    fn from(e: crate::exec::CommandFailed) -> Self {
        LifecycleError::Step(e.into())
    }
}
