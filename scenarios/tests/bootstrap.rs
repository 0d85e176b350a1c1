//! Scenario `bootstrap`: the agent, deployed into a lab VM, provisions its nspawn machine and
//! the node joins the lab's cluster — the Node registers and becomes Ready, `localdns.service`
//! runs in the machine with its spare (`localdns-spare.service`) connected to the supervisor (and
//! does not exist with LocalDNS off), and an ordinary pod runs on the
//! node with its log readable through the API server (`kubectl logs`). Then `start` again:
//! on the finished node it changes nothing (files, inodes, mtimes, unit invocations), and from an
//! install state set back to `starting-node` (standing in for a `start` killed in that stage) it
//! resumes to `complete`, without installing or writing anything again, with the node still
//! Ready. `harness lab status` and `harness lab logs` (their library halves) show and collect the
//! joined node. Every case joins for real; when its
//! node config has LocalDNS on and no joined-node checkpoint yet, that join builds it (the other scenarios
//! resume from it) and the checks run on the node resumed from it.

use std::net::Ipv4Addr;
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use scenarios::cluster::{run_pod, test_pod, wait_node_ready};
use scenarios::node::JoinedNode;

/// One case per node config: `node_joins_runs_a_pod_with_a_readable_log_and_start_again_changes_nothing::<config>`.
mod node_joins_runs_a_pod_with_a_readable_log_and_start_again_changes_nothing {
    use scenarios::node_config_case;
    scenarios::for_every_node_config!(
        node_config_case,
        scenarios::node::JoinedNode::run_case_joining,
        super::bootstrap
    );
}

fn bootstrap(node: &mut JoinedNode) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();

    // The Node registers with the VM's lab address and the node config's labels, and is Ready.
    let waited = Instant::now();
    let ready = node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    eprintln!(
        "==> Node {name} Ready {:.1}s after `start` returned",
        waited.elapsed().as_secs_f64()
    );
    let addresses = ready
        .status
        .as_ref()
        .and_then(|s| s.addresses.clone())
        .unwrap_or_default();
    let internal: Vec<&str> = addresses
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| a.address.as_str())
        .collect();
    let node_ip = node.deployed.node_ip.to_string();
    ensure!(
        internal == [node_ip.as_str()],
        "Node {name} has InternalIP {internal:?}, expected the VM's lab address {}",
        node.deployed.node_ip
    );
    let labels = ready.metadata.labels.clone().unwrap_or_default();
    for (key, value) in &node.node.node_labels {
        ensure!(
            labels.get(key) == Some(value),
            "Node {name} lacks label {key}={value}: {labels:?}"
        );
    }

    // LocalDNS in the machine: active when enabled, absent when not.
    let machine = node.machine()?;
    ensure!(
        machine == "kube1",
        "a first install runs in slot kube1, not {machine}"
    );
    let (status, active) = node.machine_systemctl(&machine, "is-active localdns.service")?;
    let (_, load) = node.machine_systemctl(&machine, "show -p LoadState --value localdns.service")?;
    if node.node.local_dns {
        ensure!(
            status == Some(0) && active.trim() == "active",
            "localdns.service in {machine} is {:?} (exit {status:?}), expected active",
            active.trim()
        );
        the_spare_watches_the_supervisor(node, &machine)?;
    } else {
        ensure!(
            load.trim() == "not-found",
            "with LocalDNS off, localdns.service must not exist in {machine}; its LoadState is {:?}",
            load.trim()
        );
        // LocalDNS off: no LocalDNS host state or machine units/files, and ClusterFirst pods
        // resolve through Cluster.ClusterDNS.
        scenarios::host_state::ensure_localdns_absent(&node.vm, &machine)?;
        let cluster_dns = node.cluster().cluster_dns;
        scenarios::pod_dns::a_cluster_first_pod_resolves_the_kubernetes_service_through(node, cluster_dns)?;
    }

    status_and_logs_show_the_node(node, &machine)?;

    // An ordinary pod (pod network, not hostNetwork, image never pulled) runs on the node and
    // its log comes back through the API server.
    let marker = format!("bootstrap-pod-on-{name}");
    let script = format!("echo {marker}; echo ip=$(hostname -i)");
    let pod = test_pod(
        "bootstrap",
        &name,
        &node.artifacts.test_image_ref,
        &["/bin/sh", "-c", &script],
    );
    let started = Instant::now();
    let finished = node
        .block_on(run_pod(&node.client, "default", &pod, node.deadline(3)))
        .context("running the bootstrap pod")?;
    eprintln!(
        "==> pod ran and its log was read in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    ensure!(
        finished.log.lines().next() == Some(marker.as_str()),
        "the pod's log does not start with {marker:?}:\n{}",
        finished.log
    );
    let pod_ip: Ipv4Addr = finished
        .ip()
        .context("the finished pod has no podIP")?
        .parse()
        .context("the pod's IP is not IPv4")?;
    let cidr = &node.deployed.pod_cidr;
    if !in_cidr(pod_ip, cidr)? {
        bail!("pod IP {pod_ip} is not in the node's pod CIDR {cidr} (hostNetwork would give the node IP)");
    }
    ensure!(
        finished.log.contains(&format!("ip={pod_ip}")),
        "the pod saw another address than its podIP {pod_ip}:\n{}",
        finished.log
    );

    let started = Instant::now();
    second_start_changes_nothing(node, &machine)?;
    eprintln!(
        "==> a second `start` changed nothing; checked in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    interrupted_start_resumes_to_complete(node, &machine)?;
    eprintln!(
        "==> `start` from `starting-node` resumed to `complete`; checked in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The spare (`localdns-spare.service`, started with `localdns.service`) runs and is connected
/// to the supervisor's socket, so that it would answer if the supervisor died (the faults
/// scenario kills it).
fn the_spare_watches_the_supervisor(node: &JoinedNode, machine: &str) -> anyhow::Result<()> {
    use agent::supervisor::spare::{CONNECTED, UNIT};
    let started = std::time::Instant::now();
    loop {
        let (_, active) = node.machine_systemctl(machine, &format!("is-active {UNIT}"))?;
        let journal = node
            .vm
            .run_unchecked(&scenarios::dns::in_machine(
                machine,
                &format!("journalctl -u {UNIT} -o cat --no-pager"),
            ))?
            .stdout_text();
        if active.trim() == "active" && journal.contains(CONNECTED) {
            eprintln!("==> {UNIT} runs in {machine}, connected to the supervisor");
            return Ok(());
        }
        ensure!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "{UNIT} in {machine} is {:?}, not active and connected to the supervisor within 120 s; its journal:\n{journal}",
            active.trim()
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// `harness lab status` sees the Node Ready in slot `machine` with `localdns.service` active and
/// both listeners ready (with LocalDNS off: neither), and `harness lab logs` collects the VM's
/// and the machine's journals, the ruleset and the Nodes, each non-empty, with nothing missing.
fn status_and_logs_show_the_node(node: &JoinedNode, machine: &str) -> anyhow::Result<()> {
    let status = node.status()?;
    let text = harness::inspect::status::render_text(&status);
    let vm = match status.vms.as_slice() {
        [vm] => vm,
        other => bail!(
            "`lab status` shows {} VMs, expected the node's one:\n{text}",
            other.len()
        ),
    };
    ensure!(
        vm.name == node.vm.name() && vm.problems.is_empty(),
        "`lab status`:\n{text}"
    );
    ensure!(
        vm.node.as_ref().is_some_and(|n| n.ready) && vm.slot.as_deref() == Some(machine),
        "`lab status` does not show Node Ready in slot {machine}:\n{text}"
    );
    let listeners_ready = vm.listeners.iter().filter(|l| l.ready).count();
    if node.node.local_dns {
        ensure!(
            vm.localdns.as_deref() == Some("active") && listeners_ready == 2,
            "`lab status` does not show localdns active with both listeners ready:\n{text}"
        );
    } else {
        ensure!(
            vm.localdns.as_deref() != Some("active") && listeners_ready == 0,
            "with LocalDNS off, `lab status` shows localdns or a listener up:\n{text}"
        );
    }
    eprintln!("==> harness lab status:\n{text}");

    let dir = harness::vm::evidence::test_dir(&node.test).join("lab-logs");
    let dir = node.collect_logs(&dir)?;
    let index = std::fs::read_to_string(dir.join(harness::vm::evidence::INDEX_FILE))?;
    ensure!(
        index.contains(" 0 not collected"),
        "`lab logs` missed items:\n{index}"
    );
    let name = node.vm.name();
    // The ruleset holds the NOTRACK table with LocalDNS on; off, the file still heads its command.
    let ruleset = if node.node.local_dns {
        "table ip unbounded_localdns"
    } else {
        "$ nft list ruleset"
    };
    for (file, must_contain) in [
        (format!("{name}/journal.txt"), "systemd"),
        (
            format!("{name}/machine-journal.txt"),
            &*format!("=== machine {machine}"),
        ),
        (format!("{name}/nft-ruleset.txt"), ruleset),
        ("cluster/nodes.txt".to_string(), name),
    ] {
        let text = std::fs::read_to_string(dir.join(&file))
            .with_context(|| format!("{file} in {}", dir.display()))?;
        ensure!(
            text.contains(must_contain) && index.contains(&file),
            "`lab logs`: {file} lacks {must_contain:?} or the index does not name it:\n{index}"
        );
    }
    let machine_journal = std::fs::read_to_string(dir.join(format!("{name}/machine-journal.txt")))?;
    ensure!(
        machine_journal.lines().count() > 10,
        "the machine's journal is (nearly) empty:\n{machine_journal}"
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

use agent::paths::INSTALL_STATE;

/// A second `start` on the finished node: exit 0, and every file the agent wrote keeps its
/// content, inode and mtime, and every unit it started keeps its invocation.
fn second_start_changes_nothing(node: &JoinedNode, machine: &str) -> anyhow::Result<()> {
    let before = NodeSnapshot::take(node, machine)?;
    let out = run_start_again(node)?;
    let after = NodeSnapshot::take(node, machine)?;
    before.ensure_same_as(&after, "a second `start`", &out)
}

/// `start` from an install state set back to `starting-node` re-enters that stage (without
/// checking the rootfs again) and ends at `complete`; the agent's files keep their content and the
/// Node stays Ready.
fn interrupted_start_resumes_to_complete(node: &JoinedNode, machine: &str) -> anyhow::Result<()> {
    let before = NodeSnapshot::take(node, machine)?;
    node.vm.run(&format!(
        "sed -i -E 's/(\"stage\"[[:space:]]*:[[:space:]]*)\"complete\"/\\1\"starting-node\"/' {INSTALL_STATE} \
         && grep -q '\"starting-node\"' {INSTALL_STATE}"
    ))?;
    let out = run_start_again(node)?;
    ensure!(
        out.contains("resumed at starting-node")
            && !out.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with("installed ") || l.starts_with("wrote ")
            }),
        "the resumed `start` did not skip the rootfs that `preparing-rootfs` populated:\n{out}"
    );
    let state = node.vm.run(&format!("cat {INSTALL_STATE}"))?;
    ensure!(
        state.contains("\"complete\""),
        "after resuming, the install state is not complete:\n{state}\nstart printed:\n{out}"
    );
    let after = NodeSnapshot::take(node, machine)?;
    ensure!(
        before.contents == after.contents,
        "resuming `start` changed file contents:\n{}\nstart printed:\n{out}",
        diff(&before.contents, &after.contents)
    );
    let name = node.deployed.name.clone();
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(2)))?;
    Ok(())
}

/// Runs the deployed agent's `start` again with the deployed config; its stdout and stderr.
fn run_start_again(node: &JoinedNode) -> anyhow::Result<String> {
    let command = format!(
        "{} start --config {} 2>&1",
        node.deployed.guest_agent,
        harness::deploy::plan::GUEST_CONFIG
    );
    let started = Instant::now();
    let out = node.vm.cmd(&command).timeout(node.deadline(5)).run()?;
    eprintln!(
        "==> `start` again on node {} took {:.1}s",
        node.deployed.name,
        started.elapsed().as_secs_f64()
    );
    Ok(out.stdout_text())
}

/// What `start` must leave alone on a finished node.
struct NodeSnapshot {
    /// `<sha256> <path>` of every file under 1 MB the agent writes (configs, units), sorted.
    contents: String,
    /// `<path> <size> <inode> <mtime>` of every file the agent writes, binaries included.
    stats: String,
    /// `<unit> <InvocationID>` on the host and in the machine.
    invocations: String,
}

impl NodeSnapshot {
    fn take(node: &JoinedNode, m: &str) -> anyhow::Result<NodeSnapshot> {
        let roots = [
            "/etc/unbounded".to_string(),
            "/etc/systemd/nspawn".into(),
            format!("/etc/systemd/system/systemd-nspawn@{m}.service.d"),
            agent::paths::NETWORK_UNIT.into(),
            "/etc/sysctl.d".into(),
            "/etc/modules-load.d".into(),
            format!("/var/lib/machines/{m}/etc/unbounded"),
            format!("/var/lib/machines/{m}/etc/containerd"),
            format!("/var/lib/machines/{m}/etc/cni/net.d"),
            format!("/var/lib/machines/{m}/etc/systemd/system"),
            agent::paths::in_machine(scenarios::host_state::slot(m), agent::paths::KUBELET_CONFIG),
            format!("/var/lib/machines/{m}/usr/local/bin"),
            format!("/var/lib/machines/{m}/usr/local/libexec"),
        ];
        let files = format!("find $(ls -d {} 2>/dev/null) -type f", roots.join(" "));
        // Hashing the binaries (kubelet, kubectl, CoreDNS: ~200 MB) takes minutes under TCG;
        // they are covered by size, inode and mtime below.
        let contents = node
            .vm
            .run(&format!("{files} -size -1024k -exec sha256sum {{}} + | sort -k2"))?;
        ensure!(
            contents.contains("/etc/systemd/nspawn/"),
            "the snapshot found none of the agent's nspawn files:\n{contents}"
        );
        let stats = node
            .vm
            .run(&format!("{files} -exec stat -c '%n %s %i %Y' {{}} + | sort"))?;
        let mut invocations = node.vm.run(&format!(
            "for u in systemd-nspawn@{m}.service unbounded-localdns-network.service; do \
             echo \"host $u $(systemctl show -p InvocationID --value $u)\"; done"
        ))?;
        for unit in ["containerd.service", "kubelet.service", "localdns.service"] {
            let (_, id) = node.machine_systemctl(m, &format!("show -p InvocationID --value {unit}"))?;
            invocations.push_str(&format!("{m} {unit} {}\n", id.trim()));
        }
        Ok(NodeSnapshot {
            contents,
            stats,
            invocations,
        })
    }

    fn ensure_same_as(&self, after: &NodeSnapshot, what: &str, out: &str) -> anyhow::Result<()> {
        for (name, b, a) in [
            ("file contents", &self.contents, &after.contents),
            ("sizes, inodes or mtimes", &self.stats, &after.stats),
            ("unit invocations", &self.invocations, &after.invocations),
        ] {
            ensure!(
                b == a,
                "{what} changed {name}:\n{}\nstart printed:\n{out}",
                diff(b, a)
            );
        }
        Ok(())
    }
}

/// The lines only in `before` (`-`) or only in `after` (`+`).
fn diff(before: &str, after: &str) -> String {
    let b: std::collections::BTreeSet<&str> = before.lines().collect();
    let a: std::collections::BTreeSet<&str> = after.lines().collect();
    b.difference(&a)
        .map(|l| format!("- {l}\n"))
        .chain(a.difference(&b).map(|l| format!("+ {l}\n")))
        .collect()
}

/// Whether `ip` lies in `cidr` (`a.b.c.d/n`).
fn in_cidr(ip: Ipv4Addr, cidr: &str) -> anyhow::Result<bool> {
    let (net, len) = cidr.split_once('/').context("a CIDR has a /")?;
    let net: Ipv4Addr = net.parse()?;
    let len: u32 = len.parse()?;
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    Ok(u32::from(ip) & mask == u32::from(net) & mask)
}

#[test]
fn in_cidr_takes_the_prefix_length_into_account() {
    let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
    assert!(in_cidr(ip("10.244.0.7"), "10.244.0.0/24").unwrap());
    assert!(!in_cidr(ip("10.244.1.7"), "10.244.0.0/24").unwrap());
    assert!(!in_cidr(ip("192.168.101.10"), "10.244.0.0/24").unwrap());
}

/// A `start` that fails keeps its stdout and stderr and the node's evidence (start output,
/// machine status, journals) under `$LAB_ARTIFACTS_DIR/<test>/<vm>/`, and the error says where.
/// The failure is real: the agent fetches the real rootfs from the lab's artifact server, but
/// the node config pins a wrong SHA256 for it (a stand-in for a corrupted download, which the
/// real server cannot produce).
#[test]
fn a_failing_start_keeps_its_output_and_the_nodes_evidence() -> anyhow::Result<()> {
    let wrong = "0".repeat(64);
    let mut node =
        harness::node_config::NodeConfig::load(&harness::repo::root().join("node-configs/localdns.json"))?;
    node.name = Some("bad-rootfs".into());
    node.agent_config = Some(serde_json::json!({"MachineImage": {"SHA256": wrong}}));
    let lab = scenarios::node::ClusterLab::boot(node)?;
    let err = match lab.deploy() {
        Ok(deployed) => bail!("`start` succeeded with a wrong rootfs SHA256: {deployed:?}"),
        Err(err) => err,
    };
    let text = err.to_string();
    let harness::deploy::DeployError::Start(failed) = err else {
        bail!("expected `start` to fail, got: {text}");
    };
    ensure!(failed.status != harness::vm::ExitKind::Code(0), "{text}");
    ensure!(
        failed.stderr.contains(&wrong),
        "start's stderr does not name the expected digest:\n{}",
        failed.stderr
    );
    let dir = &failed.evidence;
    ensure!(
        text.contains(&format!("evidence in {}", dir.display())),
        "the error does not say where the evidence is: {text}"
    );
    ensure!(
        dir.starts_with(harness::vm::evidence::test_dir(&lab.test)),
        "{}",
        dir.display()
    );
    for file in [
        "start.stderr",
        "start.stdout",
        "deployed-agent-config.json",
        "agent-start.txt",
        "machinectl-status.txt",
        "machine-journal.txt",
        "kubelet-journal.txt",
        "journal.txt",
        "console.log",
    ] {
        ensure!(
            dir.join(file).is_file(),
            "evidence {file} missing in {}",
            dir.display()
        );
    }
    let saved = std::fs::read_to_string(dir.join("start.stderr"))?;
    ensure!(
        saved == failed.stderr,
        "start.stderr differs from the error's stderr"
    );
    let test = lab.test.clone();
    lab.shutdown()?;
    // The evidence was what this test checks, not a failure to look into.
    std::fs::remove_dir_all(harness::vm::evidence::test_dir(&test))?;
    Ok(())
}
