//! `harness lab logs`: everything a bug report needs from a running lab in one directory, like
//! `kind export logs` — per VM (`<vm>/`) its console, QEMU's stderr, the journal, the ruleset,
//! addresses and links, `start`'s output, the agent's config and install state, the machines'
//! status and journals (kubelet, containerd, localdns); the cluster's Nodes, Pods and Events
//! (`cluster/`, through the lab's kubectl); the lab's DNS/HTTP and control plane logs (`lab/`);
//! and `index.txt` saying what each file is. An item that cannot be collected is marked in the
//! index and the rest goes on.

use std::path::{Path, PathBuf};

use super::view::LabView;
use crate::lab::record::ClusterRecord;
use crate::vm::evidence::{Collector, Guest};

/// Cluster listings: (file, what, kubectl arguments).
pub const CLUSTER_LISTINGS: [(&str, &str, &[&str]); 6] = [
    (
        "cluster/nodes.txt",
        "the Nodes (`kubectl get nodes -o wide`)",
        &["get", "nodes", "-o", "wide"],
    ),
    (
        "cluster/nodes.yaml",
        "the Nodes in full",
        &["get", "nodes", "-o", "yaml"],
    ),
    (
        "cluster/pods.txt",
        "every Pod (`kubectl get pods -A -o wide`)",
        &["get", "pods", "-A", "-o", "wide"],
    ),
    (
        "cluster/pods.yaml",
        "every Pod in full",
        &["get", "pods", "-A", "-o", "yaml"],
    ),
    (
        "cluster/events.txt",
        "every Event, oldest first",
        &["get", "events", "-A", "--sort-by=.metadata.creationTimestamp"],
    ),
    (
        "cluster/events.yaml",
        "every Event in full",
        &["get", "events", "-A", "-o", "yaml"],
    ),
];

/// The default output directory: `$LAB_ARTIFACTS_DIR/lab-logs/lab-<n>-<unix time>`.
pub fn default_dir(number: u8) -> PathBuf {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    crate::vm::evidence::artifacts_root()
        .join("lab-logs")
        .join(format!("lab-{number}-{now}"))
}

/// Collects the lab's logs into `dir`; returns the collector's entries' directory.
pub fn collect(view: &LabView, dir: &Path) -> std::io::Result<PathBuf> {
    let mut collector = Collector::new(dir, &format!("harness lab logs: {}", view.name))?;
    let owner = match view.owner {
        Some((o, true)) => format!("owner pid {} ({})", o.pid, crate::netns::cmdline(o.pid)),
        Some((o, false)) => format!("STALE: owner pid {} is gone", o.pid),
        None => "no owner file".into(),
    };
    let vms: Vec<&str> = view.vms.iter().map(|v| v.name.as_str()).collect();
    collector.text(
        "lab.txt",
        "the lab: owner, VMs, run directory",
        &format!(
            "{}: {owner}\nrun directory {}\nVMs: {}\n",
            view.name,
            view.run_dir.display(),
            vms.join(", ")
        ),
    );
    collector.copy_file(
        "lab.json",
        "the lab's record (log directories, kubeconfig, kubectl)",
        &view.run_dir.join(crate::lab::record::RECORD_FILE),
    );
    let node_commands = crate::deploy::evidence::node_commands();
    let extra: Vec<(&str, &str)> = node_commands.iter().map(|(f, c)| (*f, c.as_str())).collect();
    for vm in &view.vms {
        let running = || vm.qemu_pid().is_some();
        let mut guest = Guest::new(&vm.agent, &running);
        crate::vm::evidence::collect_vm(
            &mut collector,
            &format!("{}/", vm.name),
            &vm.run,
            &mut guest,
            &extra,
        );
    }
    match &view.record {
        Ok(record) => {
            collector.copy_dir(
                "lab",
                "the lab's DNS and HTTP logs (and the control plane's)",
                &record.log_dir,
            );
            match &record.cluster {
                Some(cluster) => {
                    if !cluster.log_dir.starts_with(&record.log_dir) {
                        collector.copy_dir("control-plane", "the control plane's logs", &cluster.log_dir);
                    }
                    cluster_listings(&mut collector, cluster);
                    if let Some(kind) = &cluster.kind {
                        kind_logs(&mut collector, kind);
                    }
                }
                None => collector.outcome(
                    "cluster/nodes.txt",
                    "the Nodes",
                    Err("the lab runs no control plane".into()),
                ),
            }
        }
        Err(why) => collector.outcome(
            "lab-logs.txt",
            "the lab's and the cluster's logs (the lab's record says where they are)",
            Err(why.clone()),
        ),
    }
    Ok(collector.finish())
}

/// `kind export logs` of the lab's Kind cluster into `kind/` (the node's journal, containerd's
/// and the kubelet's logs, every pod's logs, the engine's inspect output), and each node
/// container's output through the engine's API into `kind-engine/`.
fn kind_logs(collector: &mut Collector, kind: &crate::controlplane::KindRecord) {
    let into = collector.dir().join("kind");
    let outcome = agent::exec::run_stdout(
        std::process::Command::new(&kind.kind)
            .envs(kind.env.iter().map(|(k, v)| (k, v)))
            .args(["export", "logs", "--name", &kind.name])
            .arg(&into),
    )
    .map(|out| format!("{out}(the logs are in kind/)\n"))
    .map_err(|e| e.to_string());
    collector.outcome(
        "kind-export-logs.txt",
        "`kind export logs` of the Kind cluster: its output; the logs in kind/",
        outcome,
    );
    // The node containers' own output (the node's systemd, Kind's entrypoint), through the
    // engine's API.
    let listed = super::status::kind_engine_api(kind).and_then(|api| {
        let nodes = api
            .node_containers(&kind.name)
            .map_err(|e| agent::error_chain::Chain(&e).to_string())?;
        Ok((api, nodes))
    });
    match listed {
        Ok((api, nodes)) => {
            for node in nodes {
                let log = api
                    .logs(&node.name)
                    .map_err(|e| agent::error_chain::Chain(&e).to_string());
                collector.outcome(
                    &format!("kind-engine/{}.log", node.name),
                    "the Kind node container's output, through the engine's API",
                    log,
                );
            }
        }
        Err(why) => collector.outcome(
            "kind-engine/containers.txt",
            "the Kind node containers, through the engine's API",
            Err(why),
        ),
    }
}

fn cluster_listings(collector: &mut Collector, cluster: &ClusterRecord) {
    for (file, what, args) in CLUSTER_LISTINGS {
        let outcome = agent::exec::run_stdout(
            std::process::Command::new(&cluster.kubectl)
                .arg("--kubeconfig")
                .arg(&cluster.admin_kubeconfig)
                .arg("--request-timeout=20s")
                .args(args),
        )
        .map_err(|e| e.to_string());
        collector.outcome(file, what, outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lab_without_a_record_still_gets_an_index_naming_what_is_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let view = LabView {
            name: "lab-7".into(),
            number: 7,
            run_dir: tmp.path().join("run"),
            owner: None,
            record: Err("reading the lab record: no such file".into()),
            vms: Vec::new(),
        };
        let dir = collect(&view, &tmp.path().join("out")).unwrap();
        let index = std::fs::read_to_string(dir.join(crate::vm::evidence::INDEX_FILE)).unwrap();
        assert!(
            index.starts_with("# harness lab logs: lab-7\n# 3 files, 2 not collected\n"),
            "{index}"
        );
        assert!(
            index.contains("FAILED: reading the lab record: no such file"),
            "{index}"
        );
        let lab = std::fs::read_to_string(dir.join("lab.txt")).unwrap();
        assert!(lab.starts_with("lab-7: no owner file\n"), "{lab}");
    }

    #[test]
    fn the_cluster_listings_cover_nodes_pods_and_events() {
        let files: Vec<&str> = CLUSTER_LISTINGS.iter().map(|(f, _, _)| *f).collect();
        for want in ["cluster/nodes.txt", "cluster/pods.txt", "cluster/events.txt"] {
            assert!(files.contains(&want), "{want} missing from {files:?}");
        }
    }
}
