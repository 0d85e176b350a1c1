//! The status of a `MachineOperation` as the daemon moves it: `InProgress` when it starts,
//! `Complete` or `Failed` when it ends — phase, reason, message, `startedAt`, `completedAt`,
//! `observedMachineGeneration` and one `Succeeded` condition (docs/operations.md).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::machina::machine_operation::{MachineOperationStatus, OperationPhase};

/// The condition type the daemon keeps on every operation it ran.
pub const CONDITION: &str = "Succeeded";

fn condition(status: &str, reason: &str, message: &str, now: &Time, generation: Option<i64>) -> Condition {
    Condition {
        type_: CONDITION.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: now.clone(),
        observed_generation: generation,
    }
}

/// Started: `InProgress`, `startedAt` now (kept when the operation was started before: a
/// restarted daemon runs it again), the Machine's generation.
pub fn in_progress(
    previous: Option<&MachineOperationStatus>,
    message: &str,
    now: &Time,
    machine_generation: Option<i64>,
    op_generation: Option<i64>,
) -> MachineOperationStatus {
    let started_at = previous
        .and_then(|s| s.started_at.clone())
        .unwrap_or_else(|| now.clone());
    MachineOperationStatus {
        phase: Some(OperationPhase::InProgress),
        message: Some(message.into()),
        reason: Some("Started".into()),
        conditions: vec![condition("Unknown", "Started", message, now, op_generation)],
        started_at: Some(started_at),
        completed_at: None,
        observed_machine_generation: machine_generation,
    }
}

/// Ended: `Complete` (reason `Succeeded`) or `Failed` (reason `Failed`), `completedAt` now,
/// everything else of the started status kept.
pub fn finished(
    started: &MachineOperationStatus,
    result: Result<&str, &str>,
    now: &Time,
    op_generation: Option<i64>,
) -> MachineOperationStatus {
    let (phase, reason, status, message) = match result {
        Ok(message) => (OperationPhase::Complete, "Succeeded", "True", message),
        Err(message) => (OperationPhase::Failed, "Failed", "False", message),
    };
    MachineOperationStatus {
        phase: Some(phase),
        message: Some(message.into()),
        reason: Some(reason.into()),
        conditions: vec![condition(status, reason, message, now, op_generation)],
        completed_at: Some(now.clone()),
        ..started.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + secs).unwrap())
    }

    #[test]
    fn started_then_complete_keeps_started_at_and_generation() {
        let started = in_progress(None, "rebooting the node", &at(0), Some(7), Some(1));
        assert_eq!(started.phase, Some(OperationPhase::InProgress));
        assert_eq!(started.started_at, Some(at(0)));
        assert_eq!(started.observed_machine_generation, Some(7));
        assert_eq!(started.conditions[0].status, "Unknown");
        assert!(!started.is_terminal());
        let done = finished(&started, Ok("rebooted"), &at(30), Some(1));
        assert_eq!(done.phase, Some(OperationPhase::Complete));
        assert_eq!(
            (done.reason.as_deref(), done.message.as_deref()),
            (Some("Succeeded"), Some("rebooted"))
        );
        assert_eq!(
            (&done.started_at, &done.completed_at),
            (&Some(at(0)), &Some(at(30)))
        );
        assert_eq!(done.observed_machine_generation, Some(7));
        assert_eq!(done.conditions.len(), 1);
        assert_eq!(
            (
                done.conditions[0].type_.as_str(),
                done.conditions[0].status.as_str()
            ),
            (CONDITION, "True")
        );
        assert!(done.is_terminal());
    }

    #[test]
    fn failed_carries_the_error_and_a_restart_keeps_the_first_start() {
        let first = in_progress(None, "resetting", &at(0), None, None);
        let again = in_progress(Some(&first), "resetting", &at(50), None, None);
        assert_eq!(again.started_at, Some(at(0)));
        let failed = finished(&again, Err("no node is installed"), &at(60), None);
        assert_eq!(failed.phase, Some(OperationPhase::Failed));
        assert_eq!(failed.reason.as_deref(), Some("Failed"));
        assert_eq!(failed.message.as_deref(), Some("no node is installed"));
        assert_eq!(failed.conditions[0].status, "False");
        assert!(failed.is_terminal());
    }
}
