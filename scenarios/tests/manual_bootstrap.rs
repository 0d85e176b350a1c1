//! `kubectl unbounded machine manual-bootstrap` end to end (docs/manual-bootstrap.md): on a fresh
//! lab VM with nothing deployed, the operator's steps — create the Machine, run the plugin where
//! kubectl reaches the API server as the nodes do (inside the lab's namespace, with an admin
//! kubeconfig naming that address), copy the agent and the printed script to the host, run the
//! script as root — join a Ready node with LocalDNS wired (a ClusterFirst pod resolves through the
//! cluster listener) and the agent daemon running (`--daemon`).
//!
//! The lab's artifact sources (machine image, container images, downloads, pod CIDR) are not in a
//! Machine; they come through `--base-config`. One real join; in the default run, and with the
//! lifecycle scenarios (`cargo nextest run -p scenarios --profile lifecycle`).

use std::time::Instant;

use agent::machina::{Machine, MachineSpec};
use anyhow::{Context, ensure};
use harness::node_config::NodeConfig;
use kube::api::{Api, PostParams};
use scenarios::cluster::wait_node_ready;
use scenarios::dns::CLUSTER_LISTENER;
use scenarios::node::ClusterLab;

const SCRIPT: &str = "/root/manual-bootstrap.sh";

fn node_config() -> std::path::PathBuf {
    harness::repo::root().join("node-configs/localdns.json")
}

/// `kubectl-unbounded`, built beside the agent (`scripts/scenario.sh` builds the agent's bins).
fn plugin() -> std::path::PathBuf {
    harness::deploy::plan::target_dir()
        .join("debug")
        .join("kubectl-unbounded")
}

#[test]
fn the_printed_script_run_on_a_fresh_host_joins_a_ready_node_with_localdns_and_the_daemon()
-> anyhow::Result<()> {
    let node = NodeConfig::load(&node_config())?;
    let lab = ClusterLab::boot(node)?;
    let result = run(&lab);
    if let Err(err) = &result {
        // The host's journal of this boot (the agent's `start` and the daemon log there).
        let dir = harness::vm::evidence::test_dir(&lab.test);
        let journal = lab
            .vm
            .run_unchecked("journalctl -b --no-pager -o short-precise")
            .map(|o| o.stdout_text())
            .unwrap_or_else(|e| format!("reading the journal: {e}"));
        let saved =
            std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join("journal.txt"), journal));
        eprintln!(
            "error: {err:#}\nevidence: {} ({saved:?})",
            dir.join("journal.txt").display()
        );
    }
    let shutdown = lab.shutdown();
    result.and(shutdown)
}

fn run(lab: &ClusterLab) -> anyhow::Result<()> {
    let cluster = lab.lab.cluster().context("the lab has no control plane")?.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = runtime.block_on(cluster.client())?;
    let name = lab.node.name().to_string();

    // What the Machina API does not carry, from the lab's own values for this VM.
    let nic = harness::deploy::lab_values::nic_of(&lab.lab, &lab.vm)?;
    let values = harness::deploy::lab_values(&cluster, &lab.artifacts, &lab.vm, &nic);
    let full = lab.node.agent_config(&values)?;
    let base = serde_json::json!({
        "MachineImage": full.machine_image,
        "ContainerImages": full.container_images,
        "Downloads": full.downloads,
        "Kubelet": {"Configuration": {"podCIDR": values.pod_cidr}},
    });
    // Kept with the test's evidence: the base config given to the plugin and the plugin's HOME.
    let dir = harness::vm::evidence::test_dir(&lab.test);
    std::fs::create_dir_all(&dir)?;
    let base_path = dir.join("base-config.json");
    std::fs::write(&base_path, serde_json::to_vec_pretty(&base)?)?;

    runtime.block_on(Api::<Machine>::all(client.clone()).create(
        &PostParams::default(),
        &Machine::new(&name, MachineSpec::default()),
    ))?;
    let plugin = plugin();
    ensure!(
        plugin.exists(),
        "{} is missing: build the agent's binaries",
        plugin.display()
    );
    let out = agent::exec::run(
        lab.lab
            .command(&plugin.display().to_string())
            .args(["machine", "manual-bootstrap", &name, "--local-dns", "--daemon"])
            .arg("--node-ip")
            .arg(values.node_ip.to_string())
            .arg("--base-config")
            .arg(&base_path)
            .env("KUBECONFIG", cluster.pki_dir.join("admin.conf"))
            .env("HOME", &dir),
    )?;
    let script = String::from_utf8(out.stdout)?;
    eprintln!(
        "==> manual-bootstrap: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    ensure!(
        script.contains(&format!("\"ApiServer\": \"{}\"", cluster.api_server)),
        "the script's config should name the API server as the nodes reach it ({}):\n{script}",
        cluster.api_server
    );

    let agent = harness::deploy::plan::host_agent_binary(&harness::deploy::plan::target_dir());
    harness::deploy::agent_binary::ensure_fresh(&agent, &harness::repo::root())?;
    lab.vm.copy_in(agent, "/usr/local/bin/unbounded-agent")?;
    lab.vm.write_file(SCRIPT, script.as_bytes(), 0o700)?;
    let started = Instant::now();
    let run = lab
        .vm
        .cmd(&format!("bash {SCRIPT} 2>&1"))
        .allow_failure()
        .timeout(lab.vm.deadlines().command * harness::deploy::plan::START_COMMAND_DEADLINES)
        .run()?;
    let printed = run.stdout_text();
    ensure!(
        matches!(run.status, harness::vm::ExitKind::Code(0)),
        "the printed script failed ({:?}):\n{printed}",
        run.status
    );
    eprintln!(
        "==> the printed script ran `start` in {:.1}s:\n{}",
        started.elapsed().as_secs_f64(),
        printed.lines().rev().take(4).collect::<Vec<_>>().join("\n")
    );
    runtime.block_on(wait_node_ready(&client, &name, lab.vm.deadlines().command * 5))?;
    let daemon = lab
        .vm
        .run_unchecked(&format!("systemctl is-active {}", agent::paths::DAEMON_UNIT_NAME))?
        .stdout_text();
    ensure!(daemon.trim() == "active", "the daemon is {daemon:?}");
    let pod = scenarios::cluster::test_pod(
        "manual-bootstrap-dns",
        &name,
        &lab.artifacts.test_image_ref,
        &["nslookup", "kubernetes.default.svc.cluster.local"],
    );
    let finished = runtime.block_on(scenarios::cluster::run_pod(
        &client,
        "default",
        &pod,
        lab.vm.deadlines().command * 3,
    ))?;
    ensure!(
        finished.log.contains(&format!("Server:\t\t{CLUSTER_LISTENER}"))
            && finished.log.contains("10.96.0.1"),
        "the pod did not resolve through the cluster listener {CLUSTER_LISTENER}:\n{}",
        finished.log
    );
    eprintln!(
        "==> Node {name} Ready, the daemon active, a ClusterFirst pod resolved through {CLUSTER_LISTENER}"
    );
    Ok(())
}
