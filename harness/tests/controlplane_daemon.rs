//! `unbounded-agent daemon` against the lab's real control plane, on this host with an empty
//! root (no node installed): it runs the `MachineOperation`s that target its Machine — by
//! `machineRef` or `machineSelector` — oldest first, one at a time, through the real lifecycle
//! core, and writes their status (`InProgress` then `Complete`/`Failed`, reason, message,
//! `startedAt`, `completedAt`, `observedMachineGeneration`, the `Succeeded` condition); another
//! machine's operations and kinds that are not the agent's stay untouched; a `NodeReboot` with no
//! node fails naming why; an `AgentReset` completes and ends the daemon; finished operations are
//! deleted after `ttlSecondsAfterFinished`; watching, a new operation is run within seconds; a
//! missing Machine is one clear line. Needs root and the cached Kubernetes and CoreDNS images
//! (`harness images build`).

mod controlplane_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use agent::machina::machine_operation::{
    MachineOperation, MachineOperationSpec, MachineOperationStatus, OperationKind, OperationPhase,
};
use agent::machina::{Machine, MachineSpec};
use harness::lab::{Lab, LabSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, PostParams};

/// `unbounded-agent`, built beside this test binary (`<target>/debug/deps/..`).
fn agent_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().and_then(Path::parent).unwrap();
    let path = debug.join("unbounded-agent");
    assert!(
        path.exists(),
        "{} is missing: build the workspace (cargo build --workspace --bins)",
        path.display()
    );
    path
}

fn daemon(kubeconfig: &Path, root: &Path, machine: &str, once: bool) -> Command {
    let mut cmd = Command::new(agent_binary());
    cmd.args(["daemon", "--machine", machine, "--kubeconfig"])
        .arg(kubeconfig)
        .arg("--root")
        .arg(root)
        .env("RUST_LOG", "info");
    if once {
        cmd.arg("--once");
    }
    cmd
}

fn run(mut cmd: Command) -> Output {
    agent::exec::run_unchecked(&mut cmd).unwrap_or_else(|e| panic!("{e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn operation(name: &str, kind: OperationKind, target: Target, ttl: Option<i32>) -> MachineOperation {
    let (machine_ref, machine_selector) = match target {
        Target::Name(name) => (Some(name.to_string()), None),
        Target::Labels(pairs) => (
            None,
            Some(LabelSelector {
                match_labels: Some(
                    pairs
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                match_expressions: None,
            }),
        ),
    };
    MachineOperation::new(
        name,
        MachineOperationSpec {
            machine_ref,
            machine_selector,
            operation_kind: kind,
            parameters: BTreeMap::new(),
            ttl_seconds_after_finished: ttl,
        },
    )
}

enum Target<'a> {
    Name(&'a str),
    Labels(&'a [(&'a str, &'a str)]),
}

async fn status_of(ops: &Api<MachineOperation>, name: &str) -> Option<MachineOperationStatus> {
    ops.get(name).await.unwrap().status
}

#[tokio::test(flavor = "current_thread")]
async fn daemon_runs_its_machines_operations_through_the_lifecycle_core_and_writes_their_status() {
    let test = "daemon_runs_its_machines_operations_through_the_lifecycle_core_and_writes_their_status";
    let started = Instant::now();
    let lab = Lab::start(LabSpec {
        control_plane: true,
        ..LabSpec::for_test(test)
    })
    .unwrap_or_else(|e| panic!("starting a lab with a control plane: {e}"));
    eprintln!(
        "lab {} with its control plane up in {:.1?}",
        lab.name(),
        started.elapsed()
    );
    let cluster = lab.cluster().expect("a control plane").clone();
    let admin = cluster.client().await.unwrap_or_else(|e| panic!("{e}"));
    controlplane_support::ensure_crds(&admin).await;
    let kubeconfig = cluster.admin_kubeconfig.clone();
    let root = tempfile::tempdir().unwrap();

    let machines: Api<Machine> = Api::all(admin.clone());
    for (name, pool) in [("daemon-m1", "edge"), ("daemon-m2", "core")] {
        let mut machine = Machine::new(name, MachineSpec::default());
        machine.metadata.labels = Some(BTreeMap::from([("pool".to_string(), pool.to_string())]));
        machines.create(&PostParams::default(), &machine).await.unwrap();
    }
    let m1_generation = machines.get("daemon-m1").await.unwrap().metadata.generation;

    // Created one after the other: creation timestamps have a one-second resolution, so names
    // break ties (the daemon orders by time, then name).
    let ops: Api<MachineOperation> = Api::all(admin.clone());
    for op in [
        operation(
            "a-reboot-m1",
            OperationKind::NodeReboot,
            Target::Name("daemon-m1"),
            Some(1),
        ),
        operation(
            "b-reboot-m2",
            OperationKind::NodeReboot,
            Target::Name("daemon-m2"),
            None,
        ),
        operation(
            "c-host-reboot-m1",
            OperationKind::HostReboot,
            Target::Name("daemon-m1"),
            None,
        ),
        operation(
            "d-reset-edge",
            OperationKind::AgentReset,
            Target::Labels(&[("pool", "edge")]),
            None,
        ),
    ] {
        ops.create(&PostParams::default(), &op).await.unwrap();
    }

    // One pass: the reboot fails (no node here), then the reset completes and ends the daemon.
    let out = run(daemon(&kubeconfig, root.path(), "daemon-m1", true));
    let log = format!("stdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{log}");
    assert!(text(&out.stdout).contains("daemon: the agent was reset"), "{log}");

    let reboot = status_of(&ops, "a-reboot-m1")
        .await
        .unwrap_or_else(|| panic!("no status\n{log}"));
    assert_eq!(reboot.phase, Some(OperationPhase::Failed), "{reboot:?}\n{log}");
    assert_eq!(reboot.reason.as_deref(), Some("Failed"));
    let message = reboot.message.clone().unwrap_or_default();
    assert!(
        message.contains("`reboot` needs a finished node"),
        "the failure says why: {message}"
    );
    assert!(
        reboot.started_at.is_some() && reboot.completed_at.is_some(),
        "{reboot:?}"
    );
    assert!(reboot.started_at <= reboot.completed_at, "{reboot:?}");
    assert_eq!(reboot.observed_machine_generation, m1_generation);
    assert_eq!(reboot.conditions.len(), 1, "{reboot:?}");
    assert_eq!(
        (
            reboot.conditions[0].type_.as_str(),
            reboot.conditions[0].status.as_str()
        ),
        ("Succeeded", "False")
    );

    let reset = status_of(&ops, "d-reset-edge")
        .await
        .unwrap_or_else(|| panic!("no status\n{log}"));
    assert_eq!(reset.phase, Some(OperationPhase::Complete), "{reset:?}\n{log}");
    assert_eq!(reset.reason.as_deref(), Some("Succeeded"));
    assert!(
        reset.message.as_deref().unwrap_or_default().contains("reset"),
        "{reset:?}"
    );
    assert!(
        reset.completed_at >= reboot.completed_at,
        "one at a time, oldest first"
    );
    assert_eq!(reset.conditions[0].status, "True");

    for untouched in ["b-reboot-m2", "c-host-reboot-m1"] {
        assert_eq!(
            status_of(&ops, untouched).await,
            None,
            "{untouched} is not daemon-m1's to run\n{log}"
        );
    }

    // TTL: the failed reboot (ttl 1 s) is deleted by the next pass; the others stay.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let out = run(daemon(&kubeconfig, root.path(), "daemon-m1", true));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("daemon: nothing left to run"),
        "{}",
        text(&out.stdout)
    );
    let left: Vec<String> = ops
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|op| op.metadata.name)
        .collect();
    assert!(
        !left.contains(&"a-reboot-m1".to_string()),
        "past its TTL but kept: {left:?}"
    );
    for kept in ["b-reboot-m2", "c-host-reboot-m1", "d-reset-edge"] {
        assert!(left.contains(&kept.to_string()), "{kept} was deleted: {left:?}");
    }

    // Watching: a new operation is run within seconds of being created.
    let mut watching = daemon(&kubeconfig, root.path(), "daemon-m1", false)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let created = Instant::now();
    ops.create(
        &PostParams::default(),
        &operation(
            "e-reboot-m1",
            OperationKind::NodeReboot,
            Target::Name("daemon-m1"),
            None,
        ),
    )
    .await
    .unwrap();
    let status = loop {
        if let Some(status) = status_of(&ops, "e-reboot-m1").await.filter(|s| s.is_terminal()) {
            break status;
        }
        if let Some(exit) = watching.try_wait().unwrap() {
            panic!("the watching daemon exited ({exit})");
        }
        assert!(
            created.elapsed() < Duration::from_secs(30),
            "not run within 30 s of its creation"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "a new operation was run {:.1?} after its creation",
        created.elapsed()
    );
    assert_eq!(status.phase, Some(OperationPhase::Failed));
    watching.kill().unwrap();
    watching.wait().unwrap();

    // No such Machine: one line naming it, exit 1.
    let out = run(daemon(&kubeconfig, root.path(), "no-such-machine", true));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert_eq!(
        last, "error: the Machine no-such-machine does not exist in the cluster",
        "{stderr}"
    );

    lab.shutdown().unwrap();
}
