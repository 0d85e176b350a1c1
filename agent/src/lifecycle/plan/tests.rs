//! The planner, table-tested: every operation from every starting state, interrupted ones
//! included.

use rstest::rstest;

use super::*;
use crate::lifecycle::state::OperationRecord;

const A: &str = "aaaa";
const B: &str = "bbbb";

fn state(stage: Stage, sha: &str) -> Option<InstallState> {
    Some(InstallState::new(Slot::Kube1, stage, sha))
}

fn interrupted(kind: &str, step: &str, sha: &str) -> Option<InstallState> {
    let mut s = InstallState::new(Slot::Kube1, Stage::Complete, A);
    s.operation = Some(OperationRecord {
        kind: kind.into(),
        step: step.into(),
        config_sha256: sha.into(),
    });
    Some(s)
}

fn repave(phase: Phase) -> Option<RepaveState> {
    Some(RepaveState {
        from: Slot::Kube1,
        to: Slot::Kube2,
        phase,
        config_sha256: A.into(),
        source_boot_id: String::new(),
    })
}

fn desired(sha: &str, change: Change) -> Desired {
    Desired {
        config_sha256: sha.into(),
        change,
    }
}

fn same() -> Desired {
    desired(A, Change::Same)
}

fn names(steps: &[Step]) -> Vec<&'static str> {
    steps.iter().map(|s| s.name()).collect()
}

fn planned(
    state: Option<InstallState>,
    desired: Desired,
    op: Operation,
) -> Result<Vec<&'static str>, Refusal> {
    plan(&Observed { state, repave: None }, &desired, op).map(|s| names(&s))
}

const FULL_INSTALL: [&str; 6] = [
    "preflight",
    "preparing-host",
    "preparing-rootfs",
    "starting-node",
    "installing-daemon",
    "commit",
];

#[rstest]
#[case::fresh_host(None, A, &FULL_INSTALL)]
#[case::killed_preparing_host(state(Stage::PreparingHost, A), A, &FULL_INSTALL)]
#[case::killed_preparing_rootfs(state(Stage::PreparingRootfs, A), A,
    &["preflight", "preparing-rootfs", "starting-node", "installing-daemon", "commit"])]
#[case::killed_starting_node(state(Stage::StartingNode, A), A, &["starting-node", "installing-daemon", "commit"])]
#[case::killed_installing_daemon(state(Stage::InstallingDaemon, A), A, &["installing-daemon", "commit"])]
#[case::killed_with_another_config(state(Stage::StartingNode, B), A, &FULL_INSTALL)]
#[case::finished_same_config(state(Stage::Complete, A), A, &["ensure-running"])]
fn start_plans(#[case] s: Option<InstallState>, #[case] sha: &str, #[case] want: &[&str]) {
    assert_eq!(
        planned(s, desired(sha, Change::Same), Operation::Start).unwrap(),
        want
    );
}

#[test]
fn start_on_a_node_finished_with_another_config_points_at_apply() {
    let err = planned(state(Stage::Complete, B), same(), Operation::Start).unwrap_err();
    assert!(matches!(err, Refusal::OtherConfig { .. }), "{err}");
    assert!(
        err.to_string().contains("unbounded-agent apply --config FILE"),
        "{err}"
    );
}

#[rstest]
#[case::finished(state(Stage::Complete, A), &["render-localdns", "stop-node", "starting-node"])]
#[case::killed_while_stopping(interrupted("reboot", "stop-node", A), &["stop-node", "starting-node"])]
#[case::killed_while_starting(interrupted("reboot", "starting-node", A), &["starting-node"])]
fn reboot_plans(#[case] s: Option<InstallState>, #[case] want: &[&str]) {
    assert_eq!(planned(s, same(), Operation::Reboot).unwrap(), want);
}

#[rstest]
#[case::reboot(Operation::Reboot)]
#[case::apply(Operation::Apply)]
#[case::repave(Operation::Repave { to: None })]
fn lifecycle_operations_need_a_finished_node(#[case] op: Operation) {
    for s in [
        None,
        state(Stage::PreparingHost, A),
        state(Stage::StartingNode, A),
    ] {
        let err = planned(s, same(), op).unwrap_err();
        assert_eq!(err, Refusal::NotInstalled { op: op.name() });
    }
}

#[rstest]
#[case::no_change(Change::Same, Ok(vec![]))]
#[case::in_place(Change::InPlace { fields: vec!["LocalDNS.Enabled".into()] }, Ok(vec!["reconfigure", "commit"]))]
fn apply_plans(#[case] change: Change, #[case] want: Result<Vec<&str>, Refusal>) {
    assert_eq!(
        planned(state(Stage::Complete, A), desired(B, change), Operation::Apply),
        want
    );
}

#[test]
fn apply_of_a_change_that_needs_a_repave_is_refused_naming_the_fields() {
    let change = Change::NeedsRepave {
        fields: vec!["Cluster.Version".into(), "MachineImage".into()],
    };
    let err = planned(state(Stage::Complete, A), desired(B, change), Operation::Apply).unwrap_err();
    assert!(
        err.to_string().contains("needs a repave")
            && err.to_string().contains("Cluster.Version, MachineImage"),
        "{err}"
    );
}

#[test]
fn an_interrupted_apply_resumes_for_the_same_config_only() {
    let change = Change::InPlace {
        fields: vec!["LocalDNS".into()],
    };
    let resumed = planned(
        interrupted("apply", "commit", B),
        desired(B, change.clone()),
        Operation::Apply,
    );
    assert_eq!(resumed.unwrap(), ["commit"]);
    let other = planned(
        interrupted("apply", "commit", "cccc"),
        desired(B, change),
        Operation::Apply,
    );
    assert_eq!(other.unwrap(), ["reconfigure", "commit"]);
}

#[rstest]
#[case::reboot_then_apply(interrupted("reboot", "stop-node", A), Operation::Apply)]
#[case::apply_then_reboot(interrupted("apply", "reconfigure", B), Operation::Reboot)]
#[case::apply_then_start(interrupted("apply", "reconfigure", B), Operation::Start)]
#[case::reboot_then_repave(interrupted("reboot", "starting-node", A), Operation::Repave { to: None })]
fn another_interrupted_operation_must_be_finished_first(
    #[case] s: Option<InstallState>,
    #[case] op: Operation,
) {
    let err = planned(s, desired(A, Change::InPlace { fields: vec![] }), op).unwrap_err();
    assert!(matches!(err, Refusal::OperationUnderway { .. }), "{err}");
    assert!(err.to_string().contains("run `unbounded-agent"), "{err}");
}

#[test]
fn a_repave_runs_every_phase_to_the_other_slot() {
    let steps = planned(state(Stage::Complete, A), same(), Operation::Repave { to: None }).unwrap();
    assert_eq!(
        steps,
        [
            "preparing",
            "switching",
            "starting",
            "verifying",
            "committed",
            "cleaning",
            "finish-repave"
        ]
    );
    let err = planned(
        state(Stage::Complete, A),
        same(),
        Operation::Repave {
            to: Some(Slot::Kube1),
        },
    )
    .unwrap_err();
    assert_eq!(err, Refusal::SameSlot { slot: Slot::Kube1 });
}

#[rstest]
#[case(Phase::Preparing)]
#[case(Phase::Switching)]
#[case(Phase::Starting)]
#[case(Phase::Verifying)]
#[case(Phase::Committed)]
#[case(Phase::Cleaning)]
fn a_killed_repave_resumes_at_its_phase_and_blocks_other_operations(#[case] phase: Phase) {
    let observed = Observed {
        state: state(Stage::Complete, A),
        repave: repave(phase),
    };
    let steps = plan(&observed, &same(), Operation::Repave { to: None }).unwrap();
    assert_eq!(steps.first(), Some(&Step::Repave(phase)));
    assert_eq!(steps.last(), Some(&Step::FinishRepave));
    assert_eq!(steps.len(), Phase::ALL.len() - phase as usize + 1);
    let err = plan(
        &observed,
        &same(),
        Operation::Repave {
            to: Some(Slot::Kube1),
        },
    )
    .unwrap_err();
    assert!(matches!(err, Refusal::OtherTarget { .. }), "{err}");
    for op in [Operation::Start, Operation::Reboot, Operation::Apply] {
        let err = plan(&observed, &same(), op).unwrap_err();
        assert!(matches!(err, Refusal::RepaveUnderway { .. }), "{op:?}: {err}");
    }
    assert_eq!(plan(&observed, &same(), Operation::Reset).unwrap(), [Step::Reset]);
}

#[rstest]
#[case(None)]
#[case(state(Stage::PreparingRootfs, A))]
#[case(state(Stage::Complete, A))]
#[case(interrupted("reboot", "stop-node", A))]
fn reset_runs_from_any_state(#[case] s: Option<InstallState>) {
    assert_eq!(planned(s, same(), Operation::Reset).unwrap(), ["reset"]);
}
