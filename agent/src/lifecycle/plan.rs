//! Decide, then act: the pure planner. [`plan`] turns what was observed on the host, what is
//! desired and the operation asked for into the steps to run, or a [`Refusal`] that changes
//! nothing. An operation interrupted earlier (its step recorded in the install state, or a repave
//! record) is resumed from the step it had entered.

use super::repave_state::{Phase, RepaveState};
use super::state::{InstallState, Stage};
use crate::names::Slot;

/// What the operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Make the host a node (or leave a finished node as it is).
    Start,
    /// Managed node reboot: re-render LocalDNS (upstreams re-discovered), stop, start.
    Reboot,
    /// Bring a finished node to a changed config in place.
    Apply,
    /// Move the node to the other slot (or the given one).
    Repave { to: Option<Slot> },
    /// Remove everything of the agent's.
    Reset,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::Start => "start",
            Operation::Reboot => "reboot",
            Operation::Apply => "apply",
            Operation::Repave { .. } => "repave",
            Operation::Reset => "reset",
        }
    }
}

/// How the desired config differs from the one the active slot runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The same config (same digest).
    Same,
    /// Only what `apply` changes in place (the fields named).
    InPlace { fields: Vec<String> },
    /// Something only a repave can change (the fields named).
    NeedsRepave { fields: Vec<String> },
}

/// What the planner knows of the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub state: Option<InstallState>,
    pub repave: Option<RepaveState>,
}

/// What is wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub config_sha256: String,
    pub change: Change,
}

/// One step; its [`Step::name`] is what the state records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Preflight,
    /// Stage `preparing-host`: kernel modules and settings.
    PrepareHost,
    /// Stage `preparing-rootfs`: rootfs, binaries, images, files.
    PrepareRootfs,
    /// Stage `starting-node`: network → machine → LocalDNS ready → containerd → images → kubelet.
    StartNode,
    /// Stage `installing-daemon`: the agent daemon's unit and credentials (removed without them).
    InstallDaemon,
    /// Applied config and its sidecar, install state `complete` with the manifest.
    Commit,
    /// A finished node with the same config: start what does not run.
    EnsureRunning,
    /// Reboot: upstreams re-discovered, LocalDNS files re-rendered.
    RenderLocalDns,
    /// kubelet → containerd → machine stopped.
    StopNode,
    /// Apply: new files written, stale ones removed, what must restart restarted.
    Reconfigure,
    /// One phase of a repave.
    Repave(Phase),
    /// The repave record removed: the repave is over.
    FinishRepave,
    /// Everything of the agent's removed.
    Reset,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Preflight => "preflight",
            Step::PrepareHost => "preparing-host",
            Step::PrepareRootfs => "preparing-rootfs",
            Step::StartNode => "starting-node",
            Step::InstallDaemon => "installing-daemon",
            Step::Commit => "commit",
            Step::EnsureRunning => "ensure-running",
            Step::RenderLocalDns => "render-localdns",
            Step::StopNode => "stop-node",
            Step::Reconfigure => "reconfigure",
            Step::Repave(p) => p.as_str(),
            Step::FinishRepave => "finish-repave",
            Step::Reset => "reset",
        }
    }
}

/// Why an operation does not run; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("`{op}` needs a finished node, and this host has none (run `unbounded-agent start` first)")]
    NotInstalled { op: &'static str },
    #[error(
        "a repave from {from} to {to} is under way (phase {phase}); run `unbounded-agent repave` to \
         finish it before `{op}`"
    )]
    RepaveUnderway {
        op: &'static str,
        from: Slot,
        to: Slot,
        phase: &'static str,
    },
    #[error(
        "an `{kind}` operation was interrupted at step {step}; run `unbounded-agent {kind}` again to \
         finish it before `{op}`"
    )]
    OperationUnderway {
        op: &'static str,
        kind: String,
        step: String,
    },
    #[error(
        "this host's node ({slot}) was started with another config (sha256 {recorded}, given \
         {given}); `start` does not reconfigure a running node and changed nothing: use \
         `unbounded-agent apply --config FILE`"
    )]
    OtherConfig {
        slot: Slot,
        recorded: String,
        given: String,
    },
    #[error("the change needs a repave (`unbounded-agent repave`), not `apply`: {}; nothing changed", fields.join(", "))]
    NeedsRepave { fields: Vec<String> },
    #[error("the node already runs in {slot}; a repave moves it to the other slot")]
    SameSlot { slot: Slot },
    #[error("a repave to {recorded} is under way; `--to {asked}` does not match it")]
    OtherTarget { recorded: Slot, asked: Slot },
}

const INSTALL: [Step; 5] = [
    Step::PrepareHost,
    Step::PrepareRootfs,
    Step::StartNode,
    Step::InstallDaemon,
    Step::Commit,
];
const REBOOT: [Step; 3] = [Step::RenderLocalDns, Step::StopNode, Step::StartNode];
const APPLY: [Step; 2] = [Step::Reconfigure, Step::Commit];

/// The steps of `all` from the one named `from` on (all of them when none has that name).
fn from_step(all: &[Step], from: Option<&str>) -> Vec<Step> {
    let start = from
        .and_then(|name| all.iter().position(|s| s.name() == name))
        .unwrap_or(0);
    all[start..].to_vec()
}

fn repave_steps(from: Phase) -> Vec<Step> {
    Phase::ALL
        .iter()
        .filter(|p| **p >= from)
        .map(|p| Step::Repave(*p))
        .chain([Step::FinishRepave])
        .collect()
}

/// The finished node's state, or a refusal for `op`.
fn finished(observed: &Observed, op: Operation) -> Result<&InstallState, Refusal> {
    match &observed.state {
        Some(s) if s.stage == Stage::Complete => Ok(s),
        _ => Err(Refusal::NotInstalled { op: op.name() }),
    }
}

/// An operation other than `op` left unfinished in the state.
fn other_operation(state: &InstallState, op: Operation) -> Result<(), Refusal> {
    match &state.operation {
        Some(r) if r.kind != op.name() => Err(Refusal::OperationUnderway {
            op: op.name(),
            kind: r.kind.clone(),
            step: r.step.clone(),
        }),
        _ => Ok(()),
    }
}

/// The step an interrupted `op` had entered, if it was for the same config.
fn resumed_step<'a>(state: &'a InstallState, op: Operation, sha: &str) -> Option<&'a str> {
    state
        .operation
        .as_ref()
        .filter(|r| r.kind == op.name() && r.config_sha256 == sha)
        .map(|r| r.step.as_str())
}

/// The steps for `op`, or why it does not run.
pub fn plan(observed: &Observed, desired: &Desired, op: Operation) -> Result<Vec<Step>, Refusal> {
    if let Some(r) = &observed.repave
        && !matches!(op, Operation::Repave { .. } | Operation::Reset)
    {
        return Err(Refusal::RepaveUnderway {
            op: op.name(),
            from: r.from,
            to: r.to,
            phase: r.phase.as_str(),
        });
    }
    match op {
        Operation::Start => plan_start(observed, desired),
        Operation::Reboot => {
            let state = finished(observed, op)?;
            other_operation(state, op)?;
            Ok(from_step(&REBOOT, resumed_step(state, op, &state.config_sha256)))
        }
        Operation::Apply => {
            let state = finished(observed, op)?;
            other_operation(state, op)?;
            if let Some(step) = resumed_step(state, op, &desired.config_sha256) {
                return Ok(from_step(&APPLY, Some(step)));
            }
            match &desired.change {
                Change::Same => Ok(Vec::new()),
                Change::InPlace { .. } => Ok(APPLY.to_vec()),
                Change::NeedsRepave { fields } => Err(Refusal::NeedsRepave {
                    fields: fields.clone(),
                }),
            }
        }
        Operation::Repave { to } => {
            let state = finished(observed, op)?;
            if let Some(r) = &observed.repave {
                if let Some(asked) = to
                    && asked != r.to
                {
                    return Err(Refusal::OtherTarget {
                        recorded: r.to,
                        asked,
                    });
                }
                return Ok(repave_steps(r.phase));
            }
            other_operation(state, op)?;
            let target = to.unwrap_or(state.slot.other());
            if target == state.slot {
                return Err(Refusal::SameSlot { slot: state.slot });
            }
            Ok(repave_steps(Phase::Preparing))
        }
        Operation::Reset => Ok(vec![Step::Reset]),
    }
}

fn plan_start(observed: &Observed, desired: &Desired) -> Result<Vec<Step>, Refusal> {
    let with_preflight = |steps: &[Step]| [Step::Preflight].iter().chain(steps).copied().collect();
    let Some(state) = &observed.state else {
        return Ok(with_preflight(&INSTALL));
    };
    if state.stage == Stage::Complete {
        if state.config_sha256 != desired.config_sha256 {
            return Err(Refusal::OtherConfig {
                slot: state.slot,
                recorded: state.config_sha256.clone(),
                given: desired.config_sha256.clone(),
            });
        }
        other_operation(state, Operation::Start)?;
        return Ok(vec![Step::EnsureRunning]);
    }
    if state.config_sha256 != desired.config_sha256 {
        return Ok(with_preflight(&INSTALL));
    }
    let steps = from_step(&INSTALL, Some(state.stage.as_str()));
    // Preflight checks a host where nothing of the node runs yet; once the machine may run
    // (`starting-node`), its listeners and ports are ours and preflight would refuse them.
    Ok(if state.stage < Stage::StartingNode {
        with_preflight(&steps)
    } else {
        steps
    })
}

#[cfg(test)]
mod tests;
