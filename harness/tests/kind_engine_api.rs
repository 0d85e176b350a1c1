//! The engine's API through bollard, for real (`harness::kind::engine_api`): with the engine the
//! harness detects (Podman's API served by `podman system service`, started and stopped by the
//! connection), a container labelled as a node of one Kind cluster is listed with its state and
//! its output is read back, a container of another cluster is not listed, and after the
//! connection is dropped no API service of it is left. Needs root and Podman or Docker.

use std::process::Command;

use harness::kind::engine::{Engine, PROBE_IMAGE};
use harness::kind::engine_api::{CLUSTER_LABEL, EngineApi};

fn engine_cli(engine: &Engine, args: &[&str]) -> String {
    agent::exec::run_stdout(engine.command().args(args)).unwrap_or_else(|e| panic!("{e}"))
}

/// A container of the probe image labelled as a node of cluster `cluster`, printing `says`.
fn node_container(engine: &Engine, name: &str, cluster: &str, says: &str) {
    engine
        .probe()
        .unwrap_or_else(|why| panic!("the engine cannot run containers: {why}"));
    engine_cli(
        engine,
        &[
            "run",
            "-d",
            "--name",
            name,
            "--label",
            &format!("{CLUSTER_LABEL}={cluster}"),
            "--entrypoint",
            "/bin/busybox",
            PROBE_IMAGE,
            "sh",
            "-c",
            &format!("echo {says}; echo {says}-on-stderr >&2; exec sleep 120"),
        ],
    );
}

#[test]
fn the_engines_api_lists_a_clusters_node_containers_and_reads_their_output() {
    let conf = tempfile::tempdir().unwrap();
    let engine = Engine::detect(conf.path()).unwrap_or_else(|e| panic!("{e}"));
    let id = std::process::id();
    let (cluster, other) = (format!("api-test-{id}"), format!("api-other-{id}"));
    let (node, stranger) = (
        format!("{cluster}-control-plane"),
        format!("{other}-control-plane"),
    );
    node_container(&engine, &node, &cluster, "hello-from-the-node");
    node_container(&engine, &stranger, &other, "hello-from-another-cluster");

    let env = engine.env();
    let result = std::panic::catch_unwind(|| {
        let api = EngineApi::connect(engine.kind, &env).unwrap_or_else(|e| panic!("{e:?}"));
        let service = api.service_pid();
        let nodes = api.node_containers(&cluster).unwrap_or_else(|e| panic!("{e:?}"));
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, [node.as_str()], "{nodes:?}");
        assert_eq!(nodes[0].state, "running", "{nodes:?}");
        let log = api.logs(&node).unwrap_or_else(|e| panic!("{e:?}"));
        for line in ["hello-from-the-node", "hello-from-the-node-on-stderr"] {
            assert!(
                log.contains(line),
                "{line} not in the container's output: {log:?}"
            );
        }
        assert!(!log.contains("another-cluster"), "{log:?}");
        let err = api.logs("no-such-container-of-the-lab").unwrap_err();
        assert!(
            format!("{err}").contains("no-such-container-of-the-lab"),
            "the error names the container: {err}"
        );
        drop(api);
        service
    });
    let _ = Command::new(engine.kind.name())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(["rm", "-f", "-t", "0", &node, &stranger])
        .output();
    let service = result.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    // The connection's API service (Podman's) went with it.
    if let Some(pid) = service {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "the API service (pid {pid}) is left"
        );
    }
}
