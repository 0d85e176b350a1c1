//! `unbounded-agent daemon` against the lab's real cluster (its Kind cluster), on this host with an empty
//! root (no node installed): it runs the `MachineOperation`s that target its Machine — by
//! `machineRef` or `machineSelector` — oldest first, one at a time, through the real lifecycle
//! core, and writes their status (`InProgress` then `Complete`/`Failed`, reason, message,
//! `startedAt`, `completedAt`, `observedMachineGeneration`, the `Succeeded` condition); another
//! machine's operations and kinds that are not the agent's stay untouched; a `NodeReboot` with no
//! node fails naming why; an `AgentReset` completes and ends the daemon; finished operations are
//! deleted after `ttlSecondsAfterFinished`; watching, a new operation is run within seconds, and
//! its Node deleted after it was seen means a repave, reported in the Machine's status; a
//! missing Machine and an applied config that no longer matches its sidecar are one clear line
//! each. Run as its own identity (the ServiceAccount and role
//! `kubectl-unbounded machine daemon-access` prints, the static `deploy/rbac/` the lab applies),
//! the daemon does its work, and that identity can neither read another Machine, change its own
//! Machine's spec, create operations, nor change or delete another machine's operations. Needs
//! root and the cached Kubernetes and CoreDNS images (`harness images build`).

mod controlplane_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use agent::machina::machine_operation::{
    MachineOperation, MachineOperationSpec, MachineOperationStatus, OperationKind, OperationPhase,
};
use agent::machina::{Machine, MachinePhase, MachineSpec};
use harness::lab::{Lab, LabSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, PostParams};

/// A binary of the `agent` crate, built beside this test binary (`<target>/debug/deps/..`).
fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().and_then(Path::parent).unwrap();
    let path = debug.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace (cargo build --workspace --bins)",
        path.display()
    );
    path
}

fn agent_binary() -> PathBuf {
    built("unbounded-agent")
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
            None,
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
            // The daemon's last act in the first pass: only the next pass can delete it.
            Some(1),
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

    // TTL: the reset (ttl 1 s) is deleted by the next pass; the others stay.
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
        !left.contains(&"d-reset-edge".to_string()),
        "past its TTL but kept: {left:?}"
    );
    for kept in ["a-reboot-m1", "b-reboot-m2", "c-host-reboot-m1"] {
        assert!(left.contains(&kept.to_string()), "{kept} was deleted: {left:?}");
    }

    // Watching: a new operation is run within seconds of being created.
    let logs = tempfile::tempdir().unwrap();
    let watching_log = logs.path().join("watching-daemon.log");
    let mut watching = daemon(&kubeconfig, root.path(), "daemon-m1", false)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&watching_log).unwrap())
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

    // Its Node deleted (updateStrategy OnDelete: no configuration) → a repave, reported in the
    // Machine's status; it fails here for want of a node. A Node never seen is never repaved.
    assert_eq!(
        machines.get("daemon-m1").await.unwrap().status,
        None,
        "no repave before the Node was seen"
    );
    let nodes: Api<Node> = Api::all(admin.clone());
    let mut node = Node::default();
    node.metadata.name = Some("daemon-m1".into());
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let registered = Instant::now();
    let seen = "its Node daemon-m1 is registered";
    while !std::fs::read_to_string(&watching_log)
        .unwrap_or_default()
        .contains(seen)
    {
        assert!(
            registered.elapsed() < Duration::from_secs(30),
            "the daemon did not see its Node within 30 s:\n{}",
            std::fs::read_to_string(&watching_log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        machines.get("daemon-m1").await.unwrap().status,
        None,
        "the Node is there: nothing to do"
    );
    let deleted = Instant::now();
    nodes.delete("daemon-m1", &Default::default()).await.unwrap();
    let status = loop {
        let status = machines.get("daemon-m1").await.unwrap().status;
        if let Some(status) = status.filter(|s| s.phase == Some(MachinePhase::Failed)) {
            break status;
        }
        if let Some(exit) = watching.try_wait().unwrap() {
            panic!("the watching daemon exited ({exit})");
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(30),
            "no repave within 30 s of the Node's deletion"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "the deleted Node's repave was attempted {:.1?} after the deletion",
        deleted.elapsed()
    );
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("repaving after the Node daemon-m1 was deleted failed")
            && message.contains("`repave` needs a finished node"),
        "{message}"
    );
    assert_eq!(status.conditions.len(), 1);
    assert_eq!(
        (
            status.conditions[0].type_.as_str(),
            status.conditions[0].status.as_str(),
            status.conditions[0].reason.as_str()
        ),
        ("NodeDeletedRepave", "False", "RepaveFailed")
    );
    watching.kill().unwrap();
    watching.wait().unwrap();

    // An applied config changed behind the agent's back: refused at start, one line, exit 1.
    let (config, sidecar) = agent::start::node::applied_paths(root.path(), agent::names::Slot::Kube1);
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "{\"changed\": true}").unwrap();
    std::fs::write(&sidecar, format!("{}  applied.json\n", "0".repeat(64))).unwrap();
    let out = run(daemon(&kubeconfig, root.path(), "daemon-m1", true));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr
            .lines()
            .last()
            .unwrap_or_default()
            .contains("does not match its sidecar"),
        "{stderr}"
    );
    std::fs::remove_file(&config).unwrap();

    a_restarted_daemon_picks_up_the_operation_it_had_started(&ops, &kubeconfig, root.path()).await;
    drift_that_cannot_be_applied_is_reported_once_and_cleared_when_it_is_gone(&machines, &kubeconfig).await;

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

/// An operation left `InProgress` by a daemon that was stopped while it ran is the first one the
/// next daemon runs, saying so, and its `startedAt` is kept.
async fn a_restarted_daemon_picks_up_the_operation_it_had_started(
    ops: &Api<MachineOperation>,
    kubeconfig: &Path,
    root: &Path,
) {
    ops.create(
        &PostParams::default(),
        &operation(
            "e-reboot-interrupted",
            OperationKind::NodeReboot,
            Target::Name("daemon-m1"),
            None,
        ),
    )
    .await
    .unwrap();
    let started: k8s_openapi::jiff::Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
    let in_progress = kube::api::Patch::Merge(serde_json::json!({"status": {
        "phase": "InProgress",
        "message": "rebooting the node (managed reboot)",
        "startedAt": started.to_string(),
    }}));
    ops.patch_status(
        "e-reboot-interrupted",
        &kube::api::PatchParams::default(),
        &in_progress,
    )
    .await
    .unwrap();
    let out = run(daemon(kubeconfig, root, "daemon-m1", true));
    let log = format!("stdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("rebooting the node again: the daemon was stopped while it ran"),
        "{log}"
    );
    let status = status_of(ops, "e-reboot-interrupted").await.expect("a status");
    assert_eq!(status.phase, Some(OperationPhase::Failed), "{status:?}\n{log}");
    assert_eq!(status.started_at.map(|t| t.0), Some(started), "startedAt is kept");
    assert!(status.completed_at.is_some());
}

/// A finished node (its install state and applied config below a root) whose Machine asks for a
/// taint the agent refuses: the daemon writes nothing of the node and reports it in the Machine's
/// `ConfigDrift` condition naming the field; once the Machine no longer asks for it, the condition
/// says the node is in sync.
async fn drift_that_cannot_be_applied_is_reported_once_and_cleared_when_it_is_gone(
    machines: &Api<Machine>,
    kubeconfig: &Path,
) {
    let root = tempfile::tempdir().unwrap();
    let applied = serde_json::json!({
        "MachineName": "drift-m1",
        "NodeName": "drift-m1",
        "Cluster": {
            "CaCertBase64": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=",
            "ClusterDNS": "10.96.0.10"
        },
        "Kubelet": {
            "ApiServer": "https://192.168.100.1:6443",
            "Auth": {"BootstrapToken": "abcdef.0123456789abcdef"},
            "NodeIP": "192.168.100.10"
        },
        // The node's own mirror is plain http, which it allows for CoreDNS.
        "Downloads": {"CoreDNS": {"BaseURL": "http://192.168.100.1:8080/coredns", "AllowHTTP": true}},
        "LocalDNS": {"Enabled": true}
    });
    let (config, _) = agent::start::node::applied_paths(root.path(), agent::names::Slot::Kube1);
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, serde_json::to_vec_pretty(&applied).unwrap()).unwrap();
    let state_path = root
        .path()
        .join(agent::paths::INSTALL_STATE.trim_start_matches('/'));
    std::fs::create_dir_all(state_path.parent().unwrap()).unwrap();
    let state = agent::install_state::InstallState::new(
        agent::names::Slot::Kube1,
        agent::install_state::Stage::Complete,
        &"a".repeat(64),
    );
    agent::install_state::save(&state_path, &state).unwrap();

    let mut machine = Machine::new(
        "drift-m1",
        MachineSpec {
            kubernetes: Some(agent::machina::KubernetesSpec {
                register_with_taints: vec!["no-effect".into()],
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    machines.create(&PostParams::default(), &machine).await.unwrap();
    let out = run(daemon(kubeconfig, root.path(), "drift-m1", true));
    let log = format!("stdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{log}");
    let status = machines.get("drift-m1").await.unwrap().status.expect("a status");
    assert_eq!(status.phase, Some(MachinePhase::Failed), "{status:?}");
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "ConfigDrift")
        .expect("ConfigDrift");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "NotApplied")
    );
    assert!(
        condition.message.contains("not valid") && condition.message.contains("Kubelet.RegisterWithTaints"),
        "{}",
        condition.message
    );
    assert!(
        !root
            .path()
            .join("etc/unbounded/agent/desired-config.json")
            .exists(),
        "an invalid desired config is never handed to the lifecycle"
    );
    assert_eq!(
        std::fs::read(&config).unwrap(),
        serde_json::to_vec_pretty(&applied).unwrap(),
        "the applied config is untouched"
    );

    machine = machines.get("drift-m1").await.unwrap();
    machine.spec.kubernetes = None;
    machines
        .replace("drift-m1", &PostParams::default(), &machine)
        .await
        .unwrap();
    let out = run(daemon(kubeconfig, root.path(), "drift-m1", true));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (status, condition) = drift_status(machines, "drift-m1").await;
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "InSync"),
        "{status:?}"
    );
    assert_eq!(status.phase, Some(MachinePhase::Ready));

    a_machine_moving_coredns_to_another_server_is_refused_before_anything_is_fetched(
        machines,
        kubeconfig,
        root.path(),
        &config,
        &applied,
    )
    .await;
}

/// The attack `daemon/source_policy.rs` stops: the Machine points CoreDNS at another server,
/// which serves another file with a sidecar that matches it (a real HTTP server, `python3 -m
/// http.server`). The daemon refuses before fetching anything: the Machine's status names the
/// missing pin and the base the server is not below, no desired config is written, nothing is
/// installed and the server saw no request.
async fn a_machine_moving_coredns_to_another_server_is_refused_before_anything_is_fetched(
    machines: &Api<Machine>,
    kubeconfig: &Path,
    root: &Path,
    config: &Path,
    applied: &serde_json::Value,
) {
    let served = tempfile::tempdir().unwrap();
    let release = served.path().join("v1.15.0");
    std::fs::create_dir_all(&release).unwrap();
    let name = "coredns_1.15.0_linux_amd64.tgz";
    std::fs::write(release.join(name), b"not the CoreDNS this node was given").unwrap();
    let digest = agent::artifact::checksum::sha256_file(&release.join(name)).unwrap();
    std::fs::write(
        release.join(format!("{name}.sha256")),
        format!("{digest}  {name}\n"),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new("python3")
        .args(["-m", "http.server", "--bind", "127.0.0.1", &port.to_string()])
        .current_dir(served.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 serves the other file");
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "python3 -m http.server did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Reaching the server itself counts one request in its log; the daemon must add none.
    let probe = format!("{base}/v1.15.0/{name}.sha256");
    let fetched =
        agent::exec::run_stdout(Command::new("curl").args(["-sf", &probe])).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        fetched.starts_with(&digest),
        "the server serves a matching sidecar: {fetched}"
    );

    let mut machine = machines.get("drift-m1").await.unwrap();
    machine.spec.agent = Some(agent::machina::AgentSpec {
        downloads: Some(agent::machina::AgentDownloadsSpec {
            core_dns: Some(agent::machina::DownloadSourceSpec {
                base_url: Some(base.clone()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    machines
        .replace("drift-m1", &PostParams::default(), &machine)
        .await
        .unwrap();
    let out = run(daemon(kubeconfig, root, "drift-m1", true));
    let _ = server.kill();
    let log = server.wait_with_output().unwrap();
    let requests = text(&log.stderr);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (status, condition) = drift_status(machines, "drift-m1").await;
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "NotApplied"),
        "{status:?}"
    );
    assert_eq!(status.phase, Some(MachinePhase::Failed));
    for needle in [
        "the Machine asks for downloads this node does not take",
        "Downloads.CoreDNS.SHA256.coredns",
        &format!("{base}/v1.15.0/{name}"),
        "is not below a base this node's own config allows",
    ] {
        assert!(
            condition.message.contains(needle),
            "{needle:?} not in {:?}",
            condition.message
        );
    }
    assert_eq!(
        requests.matches("GET ").count(),
        1,
        "the daemon fetched from the Machine's server:\n{requests}"
    );
    assert!(!root.join("etc/unbounded/agent/desired-config.json").exists());
    assert!(!root.join("var/lib/machines").exists(), "something was installed");
    assert_eq!(
        std::fs::read(config).unwrap(),
        serde_json::to_vec_pretty(applied).unwrap(),
        "the applied config is untouched"
    );
}

/// The Machine's status and its `ConfigDrift` condition.
async fn drift_status(
    machines: &Api<Machine>,
    name: &str,
) -> (
    agent::machina::MachineStatus,
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition,
) {
    let status = machines.get(name).await.unwrap().status.expect("a status");
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "ConfigDrift")
        .cloned()
        .expect("ConfigDrift");
    (status, condition)
}

/// A kubeconfig holding only `token` for the lab's API server.
fn token_kubeconfig(cluster: &harness::controlplane::ClusterAccess, token: &str, path: &Path) {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(&cluster.ca_cert_pem);
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: daemon\n  user:\n    token: {token}\ncontexts:\n- name: daemon\n  context:\n    cluster: lab\n    user: daemon\ncurrent-context: daemon\n",
        cluster.host_api_server
    );
    std::fs::write(path, yaml).unwrap();
}

/// The API server refused `result` (403), and says so with `needle` when given.
fn assert_forbidden<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>, needle: Option<&str>) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {
            if let Some(needle) = needle {
                assert!(status.message.contains(needle), "{what}: {}", status.message);
            }
        }
        other => panic!("{what} should be forbidden, got {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_daemons_own_identity_runs_its_operations_and_can_touch_no_other_machines() {
    use kube::api::{DeleteParams, Patch, PatchParams};

    let test = "the_daemons_own_identity_runs_its_operations_and_can_touch_no_other_machines";
    let lab = Lab::start(LabSpec {
        control_plane: true,
        ..LabSpec::for_test(test)
    })
    .unwrap_or_else(|e| panic!("starting a lab with a control plane: {e}"));
    let cluster = lab.cluster().expect("a control plane").clone();
    let admin = cluster.client().await.unwrap_or_else(|e| panic!("{e}"));
    controlplane_support::ensure_crds(&admin).await;
    let machines: Api<Machine> = Api::all(admin.clone());
    for name in ["access-a", "access-b"] {
        machines
            .create(
                &PostParams::default(),
                &Machine::new(name, MachineSpec::default()),
            )
            .await
            .unwrap();
    }
    let ops: Api<MachineOperation> = Api::all(admin.clone());
    for op in [
        operation(
            "own-reboot",
            OperationKind::NodeReboot,
            Target::Name("access-a"),
            None,
        ),
        operation(
            "their-reboot",
            OperationKind::NodeReboot,
            Target::Name("access-b"),
            None,
        ),
    ] {
        ops.create(&PostParams::default(), &op).await.unwrap();
    }

    // The operator's steps: the plugin prints the machine's access, kubectl applies it and
    // makes a token for its ServiceAccount.
    let printed = run({
        let mut cmd = Command::new(built("kubectl-unbounded"));
        cmd.args(["machine", "daemon-access", "access-a"])
            .env("KUBECONFIG", &cluster.admin_kubeconfig);
        cmd
    });
    assert!(printed.status.success(), "{}", text(&printed.stderr));
    let mut apply = cluster.kubectl();
    apply
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = apply.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), &printed.stdout).unwrap();
    let applied = child.wait_with_output().unwrap();
    assert!(
        applied.status.success(),
        "kubectl apply: {}",
        text(&applied.stderr)
    );
    let token = run({
        let mut cmd = cluster.kubectl();
        cmd.args(["create", "token", "agent-access-a", "-n", "unbounded-system"]);
        cmd
    });
    assert!(
        token.status.success(),
        "kubectl create token: {}",
        text(&token.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("daemon.kubeconfig");
    token_kubeconfig(&cluster, text(&token.stdout).trim(), &kubeconfig);

    // The daemon works under it: reads its Machine, lists and runs its operation, writes status.
    let root = tempfile::tempdir().unwrap();
    let out = run(daemon(&kubeconfig, root.path(), "access-a", true));
    let log = format!("stdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{log}");
    let own = status_of(&ops, "own-reboot")
        .await
        .unwrap_or_else(|| panic!("no status\n{log}"));
    assert_eq!(own.phase, Some(OperationPhase::Failed), "{own:?}\n{log}");
    assert_eq!(status_of(&ops, "their-reboot").await, None);

    // What it cannot do.
    let client = harness::controlplane::access::client_from(&kubeconfig)
        .await
        .unwrap();
    let as_daemon_machines: Api<Machine> = Api::all(client.clone());
    let as_daemon_ops: Api<MachineOperation> = Api::all(client.clone());
    assert!(
        as_daemon_machines.get("access-a").await.is_ok(),
        "its own Machine"
    );
    assert_forbidden(
        "reading another Machine",
        as_daemon_machines.get("access-b").await,
        None,
    );
    let labels = Patch::Merge(serde_json::json!({"metadata": {"labels": {"hacked": "yes"}}}));
    assert_forbidden(
        "changing its own Machine",
        as_daemon_machines
            .patch("access-a", &PatchParams::default(), &labels)
            .await,
        None,
    );
    assert_forbidden(
        "creating an operation",
        as_daemon_ops
            .create(
                &PostParams::default(),
                &operation(
                    "made-by-daemon",
                    OperationKind::AgentReset,
                    Target::Name("access-b"),
                    None,
                ),
            )
            .await,
        None,
    );
    let status = Patch::Merge(serde_json::json!({"status": {"phase": "Complete", "message": "not mine"}}));
    let not_mine = "may only change MachineOperations that target it";
    assert_forbidden(
        "writing another machine's operation status",
        as_daemon_ops
            .patch_status("their-reboot", &PatchParams::default(), &status)
            .await,
        Some(not_mine),
    );
    assert_forbidden(
        "deleting another machine's operation",
        as_daemon_ops
            .delete("their-reboot", &DeleteParams::default())
            .await,
        Some(not_mine),
    );
    assert_eq!(status_of(&ops, "their-reboot").await, None, "unchanged");
    assert!(
        as_daemon_ops
            .delete("own-reboot", &DeleteParams::default())
            .await
            .is_ok(),
        "the daemon deletes its own finished operations (TTL)"
    );

    // Its token renews itself: a kubeconfig as `start` writes it (token read from a file), the
    // daemon's renewal asks the TokenRequest API for its own account and writes the file; a
    // token for another machine's account is refused.
    {
        use base64::Engine as _;
        let token_path = dir.path().join("token");
        std::fs::write(&token_path, text(&token.stdout).trim()).unwrap();
        let file_kubeconfig = dir.path().join("file.kubeconfig");
        std::fs::write(
            &file_kubeconfig,
            agent::start::daemon_unit::kubeconfig(
                &cluster.host_api_server,
                &base64::engine::general_purpose::STANDARD.encode(&cluster.ca_cert_pem),
                &token_path.display().to_string(),
            ),
        )
        .unwrap();
        let before = agent::daemon::renew::read(&token_path).unwrap();
        let client = harness::controlplane::access::client_from(&file_kubeconfig)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await; // a later `iat`
        let renewed = agent::daemon::renew::renew_once(&client, &token_path)
            .await
            .unwrap_or_else(|e| panic!("{}", agent::error_chain::chain(&e)));
        assert_eq!(renewed.subject, before.subject);
        assert!(renewed.issued_at > before.issued_at, "{before:?} → {renewed:?}");
        assert!(
            renewed.lifetime_secs() >= before.lifetime_secs() - 1,
            "{renewed:?}"
        );
        assert_eq!(agent::daemon::renew::read(&token_path).unwrap(), renewed);
        let with_new_token: Api<Machine> = Api::all(
            harness::controlplane::access::client_from(&file_kubeconfig)
                .await
                .unwrap(),
        );
        assert!(
            with_new_token.get("access-a").await.is_ok(),
            "the renewed token works"
        );
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client, "unbounded-system");
        assert_forbidden(
            "a token for another machine's account",
            accounts
                .create_token_request("agent-access-b", &PostParams::default(), &Default::default())
                .await,
            None,
        );
    }
    lab.shutdown().unwrap();
}
