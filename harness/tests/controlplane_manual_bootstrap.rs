//! `kubectl-unbounded machine manual-bootstrap` against the lab's real cluster (Kind): the printed
//! script's config validates and names the cluster's API server, CA, cluster DNS, the Machine's
//! and the flags' labels and taints, and a bootstrap token the API server accepts; a second run
//! reuses that token; a missing Machine, a bad flag and an unreachable API server are one line
//! each and exit 1. Needs root, Podman or Docker, and the cached images (`harness images build`).

mod controlplane_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use agent::machina::{
    KubernetesSpec, Machine, MachineConfiguration, MachineConfigurationKubernetes, MachineConfigurationRef,
    MachineConfigurationSpec, MachineConfigurationTemplate, MachineSpec,
};
use agent::manual_bootstrap::script::config_of;
use base64::Engine as _;
use harness::controlplane::ClusterAccess;
use harness::lab::{Lab, LabSpec};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};

/// `kubectl-unbounded`, built beside this test binary (`<target>/debug/deps/..`): a workspace
/// build (`cargo nextest run --workspace`, `cargo build --workspace`) makes it.
fn plugin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().and_then(Path::parent).unwrap();
    let path = debug.join("kubectl-unbounded");
    assert!(
        path.exists(),
        "{} is missing: build the workspace (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// Runs the plugin with `kubeconfig` as `KUBECONFIG` (and an empty `HOME`).
fn run_plugin(kubeconfig: &Path, home: &Path, args: &[&str]) -> Output {
    agent::exec::run_unchecked(
        Command::new(plugin())
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", home),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A failed run: exit 1 and exactly one line on stderr, returned.
fn one_line_failure(out: &Output) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "stdout: {}", text(&out.stdout));
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    stderr.trim_end().to_owned()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The certificates of a PEM bundle, DER.
fn ders(pem: &str) -> Vec<Vec<u8>> {
    x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes())
        .map(|p| p.unwrap().contents)
        .collect()
}

/// Who the API server says holds `token` (a SelfSubjectReview made with it alone).
async fn user_of(cluster: &ClusterAccess, token: &str) -> String {
    let mut config = kube::Config::new(cluster.host_api_server.parse().unwrap());
    config.root_cert = Some(ders(&cluster.ca_cert_pem));
    config.auth_info.token = Some(token.to_owned().into());
    let client = kube::Client::try_from(config).unwrap();
    let reviews: Api<SelfSubjectReview> = Api::all(client);
    let review = reviews
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap_or_else(|e| panic!("a SelfSubjectReview with the printed token: {e}"));
    review.status.unwrap().user_info.unwrap().username.unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn manual_bootstrap_prints_a_valid_config_for_a_real_cluster_reuses_its_token_and_fails_in_one_line() {
    let test =
        "manual_bootstrap_prints_a_valid_config_for_a_real_cluster_reuses_its_token_and_fails_in_one_line";
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
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = cluster.admin_kubeconfig.clone();

    // A configuration (labels, a version) and a Machine following it (labels, a taint).
    let configuration = MachineConfiguration::new(
        "edge",
        MachineConfigurationSpec {
            template: MachineConfigurationTemplate {
                kubernetes: Some(MachineConfigurationKubernetes {
                    version: Some(cluster.kubernetes_version.clone()),
                    node_labels: labels(&[("pool", "edge"), ("zone", "b")]),
                    register_with_taints: vec![],
                }),
                agent: None,
            },
            ..Default::default()
        },
    );
    Api::<MachineConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &configuration)
        .await
        .unwrap();
    let machine = Machine::new(
        "mb-node-1",
        MachineSpec {
            kubernetes: Some(KubernetesSpec {
                node_labels: labels(&[("role", "edge"), ("zone", "a")]),
                register_with_taints: vec!["dedicated=edge:NoSchedule".into()],
                ..Default::default()
            }),
            configuration_ref: Some(MachineConfigurationRef {
                name: "edge".into(),
                version: None,
            }),
            agent: None,
        },
    );
    Api::<Machine>::all(admin.clone())
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();

    let args = [
        "machine",
        "manual-bootstrap",
        "mb-node-1",
        "--local-dns",
        "--node-ip",
        "192.0.2.15",
        "--node-label",
        "zone=c",
        "--register-with-taint",
        "gpu=true:NoExecute",
    ];
    let first_started = Instant::now();
    let out = run_plugin(&kubeconfig, home.path(), &args);
    eprintln!("first run: {:.1?}", first_started.elapsed());
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("(created, expires "), "{stderr}");
    let script = text(&out.stdout);
    assert!(script.starts_with("#!/usr/bin/env bash\n"), "{script}");
    assert!(script.contains("\nset -euo pipefail\n"), "{script}");
    assert!(
        script.contains("exec 'unbounded-agent' start --config \"$config\""),
        "{script}"
    );
    let json = config_of(&script).unwrap_or_else(|| panic!("no config in the script:\n{script}"));
    agent::validate::parse(&json).unwrap_or_else(|p| panic!("the printed config is invalid:\n{p}"));
    let config: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(config["MachineName"], "mb-node-1");
    assert_eq!(config["NodeName"], "mb-node-1");
    assert_eq!(config["Kubelet"]["ApiServer"], cluster.host_api_server.as_str());
    assert_eq!(config["Cluster"]["ClusterDNS"], cluster.cluster_dns.to_string());
    assert_eq!(config["Cluster"]["Version"], cluster.kubernetes_version.as_str());
    let ca = base64::engine::general_purpose::STANDARD
        .decode(config["Cluster"]["CaCertBase64"].as_str().unwrap())
        .unwrap();
    assert_eq!(ders(&text(&ca)), ders(&cluster.ca_cert_pem), "the cluster CA");
    assert_eq!(
        config["Kubelet"]["Labels"],
        serde_json::json!({"pool": "edge", "role": "edge", "zone": "c"})
    );
    assert_eq!(
        config["Kubelet"]["RegisterWithTaints"],
        serde_json::json!(["dedicated=edge:NoSchedule", "gpu=true:NoExecute"])
    );
    assert_eq!(config["Kubelet"]["NodeIP"], "192.0.2.15");
    assert_eq!(config["LocalDNS"]["Enabled"], true);

    // The token: its Secret exists, is labelled for the machine, expires in about a day, and the
    // API server accepts it as a bootstrap token.
    let token = config["Kubelet"]["Auth"]["BootstrapToken"]
        .as_str()
        .unwrap()
        .to_owned();
    let (id, _) = token.split_once('.').unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    let secret = secrets.get(&format!("bootstrap-token-{id}")).await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
    assert_eq!(
        secret
            .metadata
            .labels
            .unwrap()
            .get("unbounded-cloud.io/machine")
            .map(String::as_str),
        Some("mb-node-1")
    );
    let data: BTreeMap<String, String> = secret
        .data
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, text(&v.0)))
        .collect();
    assert_eq!(data["token-id"], id);
    assert_eq!(data["usage-bootstrap-authentication"], "true");
    assert_eq!(data["usage-bootstrap-signing"], "true");
    assert_eq!(
        data["auth-extra-groups"],
        "system:bootstrappers:kubeadm:default-node-token"
    );
    let expires: k8s_openapi::jiff::Timestamp = data["expiration"].parse().unwrap();
    let left = expires.duration_since(k8s_openapi::jiff::Timestamp::now());
    assert!(
        left.as_secs() > 23 * 3600 && left.as_secs() <= 24 * 3600,
        "{left:?}"
    );
    assert_eq!(user_of(&cluster, &token).await, format!("system:bootstrap:{id}"));

    // A second run reuses the token.
    let again = run_plugin(&kubeconfig, home.path(), &args);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stderr).contains("(reused, expires "),
        "{}",
        text(&again.stderr)
    );
    let json = config_of(&text(&again.stdout)).unwrap();
    let second: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(second["Kubelet"]["Auth"]["BootstrapToken"], token.as_str());
    assert!(
        second.get("Daemon").is_none(),
        "no daemon without --daemon: {second}"
    );

    // `--daemon`: the daemon's access is applied (twice: server-side apply changes nothing the
    // second time) and the config carries a token of its ServiceAccount, valid for a day, that
    // the API server takes for that account.
    for run in ["first", "second"] {
        let with_daemon = run_plugin(
            &kubeconfig,
            home.path(),
            &["machine", "manual-bootstrap", "mb-node-1", "--daemon"],
        );
        let stderr = text(&with_daemon.stderr);
        assert!(with_daemon.status.success(), "{run} --daemon run: {stderr}");
        assert!(
            stderr.contains(
                "the daemon's token (ServiceAccount unbounded-system/agent-mb-node-1) is valid for 24 h"
            ),
            "{stderr}"
        );
        let json = config_of(&text(&with_daemon.stdout)).unwrap();
        let config: serde_json::Value = serde_json::from_str(&json).unwrap();
        let daemon_token = config["Daemon"]["Token"]
            .as_str()
            .unwrap_or_else(|| panic!("{config}"));
        let claims = agent::service_account_token::claims(daemon_token).unwrap();
        assert_eq!(claims.lifetime_secs(), 86_400, "{claims:?}");
        assert_eq!(
            user_of(&cluster, daemon_token).await,
            "system:serviceaccount:unbounded-system:agent-mb-node-1"
        );
        agent::validate::parse(&json).unwrap_or_else(|p| panic!("the printed config is invalid:\n{p}"));
    }
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(admin.clone(), "unbounded-system");
    let token_role = roles.get("unbounded-agent-daemon-token:mb-node-1").await.unwrap();
    assert_eq!(
        token_role.rules.unwrap()[0].resource_names,
        Some(vec!["agent-mb-node-1".to_string()])
    );

    // A missing Machine, a bad flag: one line, exit 1.
    let missing = run_plugin(
        &kubeconfig,
        home.path(),
        &["machine", "manual-bootstrap", "no-such-machine"],
    );
    assert_eq!(
        one_line_failure(&missing),
        r#"error: machine "no-such-machine" not found"#
    );
    let bad_ip = run_plugin(
        &kubeconfig,
        home.path(),
        &[
            "machine",
            "manual-bootstrap",
            "mb-node-1",
            "--node-ip",
            "300.1.1.1",
        ],
    );
    assert_eq!(
        one_line_failure(&bad_ip),
        r#"error: --node-ip "300.1.1.1": "300.1.1.1" is not an IP address"#
    );

    let no_base = run_plugin(
        &kubeconfig,
        home.path(),
        &[
            "machine",
            "manual-bootstrap",
            "mb-node-1",
            "--base-config",
            "/nonexistent/base.json",
        ],
    );
    let line = one_line_failure(&no_base);
    assert!(
        line.starts_with(r#"error: --base-config "/nonexistent/base.json": cannot be read: "#),
        "{line}"
    );

    // An API server nobody listens on: one line naming it.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let closed = format!("https://127.0.0.1:{port}");
    let mut doc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    for c in doc["clusters"].as_sequence_mut().unwrap() {
        c["cluster"]["server"] = closed.clone().into();
    }
    let dead = home.path().join("dead-kubeconfig");
    std::fs::write(&dead, serde_yaml_ng::to_string(&doc).unwrap()).unwrap();
    let unreachable = run_plugin(&dead, home.path(), &["machine", "manual-bootstrap", "mb-node-1"]);
    let line = one_line_failure(&unreachable);
    assert!(
        line.starts_with(&format!("error: cannot reach the API server {closed}: ")),
        "{line}"
    );

    lab.shutdown().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("whole test: {:.1?}", started.elapsed());
}
