//! The lab's Kind cluster, for real: Kind's CLI creates a cluster from the lab's node image in the
//! engine the harness chose; its node becomes Ready, the cluster's own CoreDNS runs as the
//! `kube-dns` Deployment and answers on the Service's ClusterIP through kube-proxy's nftables
//! rules; the host's kubectl reaches the API server with the kubeconfig Kind wrote; `kind get
//! clusters` lists it; its node is in the cluster's own network, which another cluster's network
//! cannot reach; `kind delete cluster` leaves no container, volume or network of it; a create
//! stopped at its timeout leaves nothing either.
//! Needs root, Podman or Docker, and the cached images (`harness images build`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use harness::cache::Cache;
use harness::images::{kind_node, kind_tool, kubernetes};
use harness::kind::cluster::{self, KindCluster};
use harness::kind::engine::Engine;
use harness::vm::evidence;
use harness::wait::{Attempt, WaitTimeout, retry, wait_until};

/// Deletes the cluster when the test ends, passed or not.
struct DeleteOnDrop(Option<KindCluster>);

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        if let Some(cluster) = self.0.take()
            && let Err(e) = cluster.delete()
        {
            eprintln!("deleting Kind cluster {}: {e}", cluster.name);
        }
    }
}

fn kubectl(kubectl: &Path, kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
    agent::exec::run_stdout(
        Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn kind_creates_a_cluster_whose_coredns_answers_on_the_kube_dns_clusterip_and_deletes_it_leaving_nothing() {
    let cache = Cache::open().unwrap();
    let need = "run `harness images build` first";
    let tool = kind_tool::require(&cache).unwrap_or_else(|e| panic!("{e}; {need}"));
    let image = kind_node::require(&cache).unwrap_or_else(|e| panic!("{e}; {need}"));
    let host_kubectl = kubernetes::require(&cache)
        .unwrap_or_else(|e| panic!("{e}; {need}"))
        .binary("kubectl");
    let evidence = evidence::test_dir("kind_cluster");
    std::fs::create_dir_all(&evidence).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::detect(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}", engine.describe());

    let name = format!("kind-test-{}", std::process::id());
    let log = evidence.join("kind-create.log");
    let created = KindCluster::create(&name, &engine, &tool, &image, dir.path(), &log)
        .unwrap_or_else(|e| panic!("{e}"));
    let guard = DeleteOnDrop(Some(created));
    let cluster = guard.0.as_ref().unwrap();

    let listed = cluster::list(&engine, &tool).unwrap();
    assert!(listed.contains(&name), "kind get clusters: {listed:?}");
    the_node_is_in_its_own_network_which_another_labs_network_cannot_reach(&engine, cluster);

    let kubeconfig = &cluster.kubeconfig;
    let ready = r#"{.items[*].status.conditions[?(@.type=="Ready")].status}"#;
    wait_until::<_, WaitTimeout>(
        &name,
        Duration::from_secs(300),
        "the node Ready",
        || match kubectl(
            &host_kubectl,
            kubeconfig,
            &["get", "nodes", "-o", &format!("jsonpath={ready}")],
        ) {
            Ok(status) if status.trim() == "True" => Attempt::Ready(()),
            Ok(status) => retry(format!("Ready={status:?}")),
            Err(e) => retry(e),
        },
    )
    .unwrap_or_else(|e| panic!("{e}; kind's output: {}", log.display()));

    let cluster_ip = kubectl(
        &host_kubectl,
        kubeconfig,
        &[
            "-n",
            "kube-system",
            "get",
            "service",
            "kube-dns",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    )
    .unwrap();
    assert_eq!(cluster_ip, "10.96.0.10");
    let pods = r#"{range .items[*]}{.metadata.name}={.status.podIP},{.status.conditions[?(@.type=="Ready")].status};{end}"#;
    wait_until::<_, WaitTimeout>(
        &name,
        Duration::from_secs(300),
        "the CoreDNS pods Ready",
        || match kubectl(
            &host_kubectl,
            kubeconfig,
            &[
                "-n",
                "kube-system",
                "get",
                "pods",
                "-l",
                "k8s-app=kube-dns",
                "-o",
                &format!("jsonpath={pods}"),
            ],
        ) {
            Ok(list)
                if !list.is_empty()
                    && list
                        .split(';')
                        .filter(|p| !p.is_empty())
                        .all(|p| p.ends_with(",True")) =>
            {
                Attempt::Ready(())
            }
            Ok(list) => retry(format!("pods: {list:?}")),
            Err(e) => retry(e),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // A query to the ClusterIP from the node goes through kube-proxy's DNAT to a CoreDNS pod.
    let answer =
        wait_until::<_, WaitTimeout>(&name, Duration::from_secs(120), "an answer on 10.96.0.10", || {
            match cluster.exec_in_node(&[
                "dig",
                "+short",
                "+time=2",
                "+tries=1",
                "@10.96.0.10",
                "kubernetes.default.svc.cluster.local",
            ]) {
                Ok(out) if !out.trim().is_empty() => Attempt::Ready(out),
                Ok(out) => retry(format!("dig printed {out:?}")),
                Err(e) => retry(e),
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer.trim(), "10.96.0.1");
    let table = cluster
        .exec_in_node(&["nft", "list", "table", "ip", "kube-proxy"])
        .unwrap();
    assert!(
        table.contains("10.96.0.10"),
        "kube-proxy's table names the kube-dns ClusterIP:\n{table}"
    );

    drop(guard);
    nothing_left_of(&engine, &tool, &name);
}

fn run(command: &mut Command) -> Result<String, agent::exec::CommandFailed> {
    agent::exec::run_stdout(command)
}

/// A busybox container (the engine's probe image) in `network`, pinging `ip` once.
fn ping_from(engine: &Engine, network: &str, ip: &str) -> Result<String, agent::exec::CommandFailed> {
    run(engine.command().args([
        "run",
        "--rm",
        "--net",
        network,
        "--entrypoint",
        "/bin/busybox",
        harness::kind::engine::PROBE_IMAGE,
        "ping",
        "-c",
        "1",
        "-W",
        "3",
        ip,
    ]))
}

/// The node's only network is `kind-<name>`; a container in it reaches the node (the control),
/// one in another lab's network made the same way does not.
fn the_node_is_in_its_own_network_which_another_labs_network_cannot_reach(
    engine: &Engine,
    cluster: &KindCluster,
) {
    let node = cluster.control_plane_container();
    let networks = run(engine.command().args([
        "inspect",
        "--format",
        "{{range $name, $net := .NetworkSettings.Networks}}{{$name}}={{$net.IPAddress}} {{end}}",
        &node,
    ]))
    .unwrap();
    let networks: Vec<&str> = networks.split_whitespace().collect();
    let own = cluster.network();
    let [only] = networks.as_slice() else {
        panic!("node {node} is in {networks:?}, not only in {own}");
    };
    let (network, ip) = only.split_once('=').unwrap();
    assert_eq!(network, own, "node {node}'s network");
    ping_from(engine, &own, ip)
        .unwrap_or_else(|e| panic!("control: a container in {own} pings the node: {e}"));
    let other = format!("{own}-other");
    cluster::ensure_network(engine, &other).unwrap();
    let reached = ping_from(engine, &other, ip);
    let _ = run(engine.command().args(["network", "rm", "-f", &other]));
    assert!(
        reached.is_err(),
        "a container in another lab's network {other} reached node {node} at {ip}: {reached:?}"
    );
}

/// A `kind create cluster` that runs past its timeout is stopped, the error names the timeout's
/// variable and says what became of the half-made cluster, and no container, volume or network
/// of it is left. (A real Kind create, bounded at 3 s: it takes 12–16 s here.)
#[test]
fn a_kind_create_that_runs_past_its_timeout_is_stopped_and_leaves_nothing() {
    let cache = Cache::open().unwrap();
    let need = "run `harness images build` first";
    let tool = kind_tool::require(&cache).unwrap_or_else(|e| panic!("{e}; {need}"));
    let image = kind_node::require(&cache).unwrap_or_else(|e| panic!("{e}; {need}"));
    let evidence = evidence::test_dir("kind_cluster_timeout");
    std::fs::create_dir_all(&evidence).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::detect(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let name = format!("kind-slow-{}", std::process::id());
    let log = evidence.join("kind-create.log");
    let result = KindCluster::create_with_config(
        &name,
        &engine,
        &tool,
        &image,
        dir.path(),
        &cluster::kind_config(),
        &log,
        Duration::from_secs(3),
    );
    let err = match result {
        Ok(made) => {
            let _ = made.delete();
            panic!("kind created cluster {name} within 3 s")
        }
        Err(e) => e,
    };
    let text = err.to_string();
    assert!(
        matches!(err, cluster::KindError::CreateTimedOut { .. }),
        "not a timeout: {text}"
    );
    for wanted in [
        "LAB_KIND_CREATE_TIMEOUT",
        "its containers, volumes and network were removed",
        &log.display().to_string(),
    ] {
        assert!(text.contains(wanted), "{wanted:?} not in: {text}");
    }
    nothing_left_of(&engine, &tool, &name);
}

/// No trace of Kind cluster `name` in `engine`: `kind get clusters` does not list it, and no
/// container labelled for it, no volume of its node and no network of it is left.
fn nothing_left_of(engine: &Engine, tool: &kind_tool::KindTool, name: &str) {
    let listed = cluster::list(engine, tool).unwrap();
    assert!(
        !listed.contains(&name.to_string()),
        "kind get clusters still lists {name}: {listed:?}"
    );
    let containers = run(engine.command().args([
        "ps",
        "-a",
        "--filter",
        &format!("label=io.x-k8s.kind.cluster={name}"),
        "--format",
        "{{.Names}}",
    ]))
    .unwrap();
    assert_eq!(containers.trim(), "", "containers left of {name}");
    let volumes = run(engine.command().args([
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label={name}-control-plane=true"),
    ]))
    .unwrap();
    assert_eq!(volumes.trim(), "", "volumes left of {name}");
    assert!(
        run(engine
            .command()
            .args(["network", "inspect", &cluster::network_of(name)]))
        .is_err(),
        "the network of {name} is left"
    );
}
