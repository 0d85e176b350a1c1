//! Which `MachineOperation`s are this machine's, and which to run next: decided from the listed
//! objects alone, so a restarted daemon makes the same choice.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::{Selector, SelectorExt};

use crate::lifecycle::Operation;
use crate::machina::machine_operation::{MachineOperation, OperationKind, OperationPhase};

/// The machine the daemon acts for: its name and labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// The lifecycle operation an operation kind maps to; `None` for kinds that are not the agent's
/// (`AgentUpgrade`, the `Host*` kinds: a controller acts on those).
pub fn lifecycle_operation(kind: OperationKind) -> Option<Operation> {
    match kind {
        OperationKind::NodeReboot => Some(Operation::Reboot),
        OperationKind::AgentReset => Some(Operation::Reset),
        OperationKind::AgentUpgrade
        | OperationKind::HostReboot
        | OperationKind::HostPowerOff
        | OperationKind::HostPowerOn
        | OperationKind::HostReimage => None,
    }
}

/// Whether `op` names this machine: `machineRef` equal to its name, or a `machineSelector` its
/// labels match (an empty selector matches every machine; one that cannot be parsed, none).
pub fn targets(op: &MachineOperation, me: &Me) -> bool {
    if let Some(name) = &op.spec.machine_ref {
        return *name == me.name;
    }
    match &op.spec.machine_selector {
        Some(selector) => Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(&me.labels)),
        None => false,
    }
}

fn phase(op: &MachineOperation) -> Option<OperationPhase> {
    op.status.as_ref().and_then(|s| s.phase)
}

fn created(op: &MachineOperation) -> (Option<&Time>, &str) {
    (
        op.metadata.creation_timestamp.as_ref(),
        op.metadata.name.as_deref().unwrap_or(""),
    )
}

/// The next operation to run, if any: among those that target this machine with a kind the agent
/// handles and that are not being deleted, one already `InProgress` first (this daemon started it
/// and was stopped before it finished: it is run again — the lifecycle operations converge), else
/// the oldest not started (`Pending` or no status), by creation time and then name.
pub fn next<'a>(ops: &'a [MachineOperation], me: &Me) -> Option<&'a MachineOperation> {
    let mine = || {
        ops.iter().filter(|op| {
            op.metadata.deletion_timestamp.is_none()
                && targets(op, me)
                && lifecycle_operation(op.spec.operation_kind).is_some()
        })
    };
    if let Some(op) = mine()
        .filter(|op| phase(op) == Some(OperationPhase::InProgress))
        .min_by(|a, b| created(a).cmp(&created(b)))
    {
        return Some(op);
    }
    mine()
        .filter(|op| matches!(phase(op), None | Some(OperationPhase::Pending)))
        .min_by(|a, b| created(a).cmp(&created(b)))
}

/// Whether `op` (one of this machine's) finished more than its `ttlSecondsAfterFinished` before
/// `now`, so it is to be deleted. Without a TTL, or not finished, it is kept.
pub fn expired(op: &MachineOperation, now: &Time) -> bool {
    let Some(ttl) = op.spec.ttl_seconds_after_finished else {
        return false;
    };
    let Some(status) = op.status.as_ref().filter(|s| s.is_terminal()) else {
        return false;
    };
    let Some(done) = &status.completed_at else {
        return false;
    };
    now.0.duration_since(done.0).as_secs() >= i64::from(ttl.max(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machina::machine_operation::{MachineOperationSpec, MachineOperationStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use k8s_openapi::jiff::Timestamp;

    fn me() -> Me {
        Me {
            name: "m1".into(),
            labels: BTreeMap::from([("pool".into(), "edge".into()), ("zone".into(), "a".into())]),
        }
    }

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + secs).unwrap())
    }

    fn op(name: &str, created: i64, kind: OperationKind, target: &str) -> MachineOperation {
        let mut op = MachineOperation::new(
            name,
            MachineOperationSpec {
                machine_ref: Some(target.into()),
                machine_selector: None,
                operation_kind: kind,
                parameters: BTreeMap::new(),
                ttl_seconds_after_finished: None,
            },
        );
        op.metadata.creation_timestamp = Some(at(created));
        op
    }

    fn with_phase(mut op: MachineOperation, phase: OperationPhase) -> MachineOperation {
        op.status = Some(MachineOperationStatus {
            phase: Some(phase),
            ..Default::default()
        });
        op
    }

    fn selector(labels: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            match_expressions: Some(exprs),
        }
    }

    #[test]
    fn machine_ref_targets_only_the_named_machine() {
        assert!(targets(&op("a", 0, OperationKind::NodeReboot, "m1"), &me()));
        assert!(!targets(&op("a", 0, OperationKind::NodeReboot, "m2"), &me()));
    }

    #[test]
    fn machine_selector_matches_labels_and_expressions() {
        let mut o = op("a", 0, OperationKind::NodeReboot, "x");
        o.spec.machine_ref = None;
        o.spec.machine_selector = Some(selector(&[("pool", "edge")], vec![]));
        assert!(targets(&o, &me()));
        o.spec.machine_selector = Some(selector(&[("pool", "core")], vec![]));
        assert!(!targets(&o, &me()));
        o.spec.machine_selector = Some(selector(
            &[],
            vec![LabelSelectorRequirement {
                key: "zone".into(),
                operator: "NotIn".into(),
                values: Some(vec!["a".into()]),
            }],
        ));
        assert!(!targets(&o, &me()));
        o.spec.machine_selector = Some(selector(
            &[],
            vec![LabelSelectorRequirement {
                key: "zone".into(),
                operator: "Bogus".into(),
                values: None,
            }],
        ));
        assert!(
            !targets(&o, &me()),
            "a selector that cannot be parsed matches nothing"
        );
        o.spec.machine_selector = None;
        assert!(
            !targets(&o, &me()),
            "neither machineRef nor machineSelector: no machine"
        );
    }

    #[test]
    fn next_resumes_an_operation_in_progress_before_older_pending_ones() {
        let ops = vec![
            op("old", 0, OperationKind::NodeReboot, "m1"),
            with_phase(
                op("started", 5, OperationKind::AgentReset, "m1"),
                OperationPhase::InProgress,
            ),
        ];
        assert_eq!(
            next(&ops, &me()).unwrap().metadata.name.as_deref(),
            Some("started")
        );
    }

    #[test]
    fn next_takes_the_oldest_pending_of_mine_with_a_kind_the_agent_handles() {
        let ops = vec![
            op("newer", 10, OperationKind::NodeReboot, "m1"),
            op("other-machine", 0, OperationKind::NodeReboot, "m2"),
            op("controllers", 1, OperationKind::HostReboot, "m1"),
            with_phase(
                op("done", 2, OperationKind::NodeReboot, "m1"),
                OperationPhase::Complete,
            ),
            with_phase(
                op("failed", 3, OperationKind::NodeReboot, "m1"),
                OperationPhase::Failed,
            ),
            with_phase(
                op("pending", 4, OperationKind::AgentReset, "m1"),
                OperationPhase::Pending,
            ),
        ];
        assert_eq!(
            next(&ops, &me()).unwrap().metadata.name.as_deref(),
            Some("pending")
        );
        assert!(next(&ops[1..5], &me()).is_none(), "nothing left for m1 to run");
    }

    #[test]
    fn an_operation_being_deleted_is_not_started() {
        let mut o = op("going", 0, OperationKind::NodeReboot, "m1");
        o.metadata.deletion_timestamp = Some(at(1));
        assert!(next(&[o], &me()).is_none());
    }

    #[test]
    fn finished_operations_expire_after_their_ttl_only() {
        let mut o = with_phase(
            op("a", 0, OperationKind::NodeReboot, "m1"),
            OperationPhase::Complete,
        );
        o.status.as_mut().unwrap().completed_at = Some(at(100));
        assert!(!expired(&o, &at(1000)), "no TTL: kept");
        o.spec.ttl_seconds_after_finished = Some(60);
        assert!(!expired(&o, &at(159)));
        assert!(expired(&o, &at(160)));
        o.spec.ttl_seconds_after_finished = Some(0);
        assert!(expired(&o, &at(100)));
        let mut running = o.clone();
        running.status.as_mut().unwrap().phase = Some(OperationPhase::InProgress);
        assert!(!expired(&running, &at(1000)), "not finished: kept");
    }
}
