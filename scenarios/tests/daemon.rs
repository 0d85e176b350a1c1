//! The agent daemon on a joined LocalDNS node, driven through the Machina API (docs/operations.md):
//! the lab gave the node its Machine and the daemon's own access, and `start` installed
//! `unbounded-agent-daemon.service` (docs/lab.md, "Machines and the daemon"); the Machine is made
//! to follow a MachineConfiguration, an `apply` without the `Daemon` section removes the daemon
//! and one with it installs it again, a `NodeReboot`
//! MachineOperation reboots the node (status `Complete`, the Node's `bootID` changed, Ready, a
//! pod resolving through the cluster listener), a change of the Machine's `MachineConfiguration`
//! turning LocalDNS off and then on again reaches the node as drift (applied in place by the
//! daemon), deleting the Node repaves it to the other slot (the Node comes back Ready, nothing of
//! the old slot is left), a second `apply` leaves the running daemon and CoreDNS alone, and an `AgentReset`
//! MachineOperation removes the agent from the host, the daemon last.
//!
//! After the reset the host is compared with the listing taken before the deploy (the one the
//! node's checkpoint holds, or taken here when it joins for real). In the default run; with the
//! lifecycle scenarios alone: `cargo nextest run -p scenarios --profile lifecycle` (docs/perf.md).

use std::time::{Duration, Instant};

use agent::machina::machine_operation::{
    MachineOperation, MachineOperationSpec, MachineOperationStatus, OperationKind, OperationPhase,
};
use agent::machina::{
    AgentSpec, LocalDnsSpec, Machine, MachineConfiguration, MachineConfigurationRef,
    MachineConfigurationSpec, MachineConfigurationTemplate,
};
use anyhow::{Context, ensure};
use kube::api::{Api, Patch, PatchParams, PostParams};
use scenarios::cluster::wait_node_ready;
use scenarios::dns::CLUSTER_LISTENER;
use scenarios::dns::{ResolvConf, machine_resolv_conf};
use scenarios::host_listing::HostListing;
use scenarios::host_state::{ensure_localdns_absent, ensure_localdns_present};
use scenarios::lifecycle::{
    RestartPolicy, agent, ensure_sleeper_survived, node_boot_id, run_case_listing_the_host_first,
    start_sleeper, wait_new_boot_id,
};
use scenarios::node::JoinedNode;
use scenarios::pod_dns::a_cluster_first_pod_resolves_the_kubernetes_service_through;

const CONFIG: &str = harness::deploy::plan::GUEST_CONFIG;
const CONFIG_WITHOUT_DAEMON: &str = "/etc/unbounded/agent/config-without-daemon.json";
const UNIT: &str = agent::paths::DAEMON_UNIT_NAME;
/// The MachineConfiguration the node's Machine follows.
const CONFIGURATION: &str = "daemon-lab";

fn node_config() -> std::path::PathBuf {
    harness::repo::root().join("node-configs/localdns.json")
}

#[test]
fn the_daemon_installed_by_apply_reboots_and_resets_its_node_through_machine_operations() -> anyhow::Result<()>
{
    run_case_listing_the_host_first(&node_config(), |node, before| {
        let name = node.deployed.name.clone();
        node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
        let machine = machine_name(node)?;
        the_machine_follows_a_configuration(node, &machine)?;
        apply_removes_and_installs_the_daemon(node)?;
        a_node_reboot_operation_reboots_the_node(node, &machine)?;
        a_configuration_change_turns_localdns_off_and_on_through_the_daemon(node, &machine)?;
        deleting_the_node_repaves_it_to_the_other_slot(node, &machine)?;
        a_second_apply_leaves_the_daemon_and_coredns_alone(node)?;
        an_agent_reset_operation_removes_the_agent(node, &machine, before)
    })
}

/// The node's Machine name: the config's `MachineName`, else its `NodeName`.
fn machine_name(node: &JoinedNode) -> anyhow::Result<String> {
    let config: serde_json::Value = serde_json::from_str(&node.vm.run(&format!("cat {CONFIG}"))?)
        .with_context(|| format!("{CONFIG} on the node is not JSON"))?;
    config
        .get("MachineName")
        .or_else(|| config.get("NodeName"))
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .with_context(|| format!("{CONFIG} names neither MachineName nor NodeName"))
}

fn localdns(enabled: bool) -> Option<AgentSpec> {
    Some(AgentSpec {
        local_dns: Some(LocalDnsSpec {
            enabled: Some(enabled),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The lab gave the node its Machine (empty spec) and its daemon's access before `start`
/// (`harness::deploy::machine`). Here the daemon's access is widened to a MachineConfiguration
/// (LocalDNS on, as the node runs), that configuration is created and the Machine made to follow it.
fn the_machine_follows_a_configuration(node: &JoinedNode, machine: &str) -> anyhow::Result<()> {
    let client = node.client.clone();
    node.block_on(async {
        let machines = Api::<Machine>::all(client.clone());
        let mut object = machines
            .get(machine)
            .await
            .with_context(|| format!("the lab made no Machine {machine} for its node"))?;
        let reference = MachineConfigurationRef {
            name: CONFIGURATION.into(),
            version: None,
        };
        object.spec.configuration_ref = Some(reference.clone());
        // The access first: the daemon reads the configuration as soon as its Machine names it.
        harness::deploy::machine::apply_daemon_access(&client, &object).await?;
        let configuration = MachineConfiguration::new(
            CONFIGURATION,
            MachineConfigurationSpec {
                template: MachineConfigurationTemplate {
                    agent: localdns(true),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        Api::<MachineConfiguration>::all(client.clone())
            .create(&PostParams::default(), &configuration)
            .await
            .with_context(|| format!("creating MachineConfiguration {CONFIGURATION}"))?;
        let patch = serde_json::json!({ "spec": { "configurationRef": reference } });
        machines
            .patch(machine, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("making Machine {machine} follow {CONFIGURATION}"))?;
        anyhow::Ok(())
    })?;
    eprintln!("==> Machine {machine} follows MachineConfiguration {CONFIGURATION}");
    Ok(())
}

/// The daemon `start` installed (the lab's config has `Daemon.Token`) runs with private
/// credentials; an `apply` of the config without the `Daemon` section removes it, and an `apply`
/// of the config with it installs it again.
fn apply_removes_and_installs_the_daemon(node: &JoinedNode) -> anyhow::Result<()> {
    let mut config: serde_json::Value = serde_json::from_str(&node.vm.run(&format!("cat {CONFIG}"))?)?;
    ensure!(
        config["Daemon"]["Token"].is_string(),
        "the lab's config for the node has no Daemon.Token"
    );
    ensure_daemon_runs(node, "after start")?;
    config
        .as_object_mut()
        .context("the node's config is not an object")?
        .remove("Daemon");
    node.vm.write_file(
        CONFIG_WITHOUT_DAEMON,
        serde_json::to_string_pretty(&config)?.as_bytes(),
        0o600,
    )?;
    let out = agent(node, &format!("apply --config {CONFIG_WITHOUT_DAEMON}"))?;
    ensure!(
        out.contains(&format!("daemon: {UNIT} stopped and disabled")),
        "apply without a Daemon section did not remove the daemon:\n{out}"
    );
    let state = node
        .vm
        .run_unchecked(&format!("systemctl show -p LoadState --value {UNIT}"))?
        .stdout_text();
    ensure!(
        state.trim() == "not-found",
        "{UNIT} is {state:?} after its removal"
    );
    let started = journal_count(node, "daemon started")?;
    let out = agent(node, &format!("apply --config {CONFIG}"))?;
    ensure!(
        out.contains(&format!("daemon: {UNIT} enabled, restarted")),
        "apply did not install and start the daemon:\n{out}"
    );
    ensure_daemon_runs(node, "after apply")?;
    let deadline = Instant::now() + node.deadline(1);
    while journal_count(node, "daemon started")? <= started {
        ensure!(
            Instant::now() < deadline,
            "the daemon installed again never said \"daemon started\""
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!("==> the daemon from start runs; apply removed it and installed it again");
    Ok(())
}

/// The unit is active and the daemon's credentials are private.
fn ensure_daemon_runs(node: &JoinedNode, when: &str) -> anyhow::Result<()> {
    let active = node
        .vm
        .run_unchecked(&format!("systemctl is-active {UNIT}"))?
        .stdout_text();
    ensure!(active.trim() == "active", "{UNIT} is {active:?} {when}");
    let modes = node.vm.run(&format!(
        "stat -c '%a %n' {} {}",
        agent::paths::DAEMON_KUBECONFIG,
        agent::paths::DAEMON_TOKEN
    ))?;
    ensure!(
        modes.lines().all(|l| l.starts_with("600 ")),
        "the daemon's credentials are not private {when}:\n{modes}"
    );
    wait_for_journal(node, "daemon started")
}

/// How many lines of the daemon's journal hold `needle`.
fn journal_count(node: &JoinedNode, needle: &str) -> anyhow::Result<usize> {
    let journal = node
        .vm
        .run_unchecked(&format!("journalctl -u {UNIT} --no-pager -o cat"))?
        .stdout_text();
    Ok(journal.lines().filter(|l| l.contains(needle)).count())
}

/// Waits until the daemon's journal holds `needle`.
fn wait_for_journal(node: &JoinedNode, needle: &str) -> anyhow::Result<()> {
    let _waiting = harness::phase_clock::enter(harness::phase_clock::Phase::Waiting);
    let deadline = Instant::now() + node.deadline(1);
    loop {
        let journal = node
            .vm
            .run_unchecked(&format!("journalctl -u {UNIT} --no-pager -o cat"))?
            .stdout_text();
        if journal.contains(needle) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the daemon's journal never said {needle:?}:\n{journal}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn operation(name: &str, machine: &str, kind: OperationKind) -> MachineOperation {
    MachineOperation::new(
        name,
        MachineOperationSpec {
            machine_ref: Some(machine.to_owned()),
            machine_selector: None,
            operation_kind: kind,
            parameters: Default::default(),
            ttl_seconds_after_finished: None,
        },
    )
}

/// Creates `op` and waits until its status is `Complete` (failing at once on `Failed`).
fn run_operation(
    node: &JoinedNode,
    op: MachineOperation,
    deadline: Duration,
) -> anyhow::Result<MachineOperationStatus> {
    let name = op.metadata.name.clone().unwrap_or_default();
    let started = Instant::now();
    let ops: Api<MachineOperation> = Api::all(node.client.clone());
    node.block_on(ops.create(&PostParams::default(), &op))
        .with_context(|| format!("creating MachineOperation {name}"))?;
    let mut last = None;
    loop {
        let status = node.block_on(ops.get(&name))?.status;
        match status.as_ref().and_then(|s| s.phase) {
            Some(OperationPhase::Complete) => {
                let status = status.expect("a phase comes with a status");
                eprintln!(
                    "==> MachineOperation {name}: Complete in {:.1}s: {}",
                    started.elapsed().as_secs_f64(),
                    status.message.clone().unwrap_or_default()
                );
                return Ok(status);
            }
            Some(OperationPhase::Failed) => anyhow::bail!("MachineOperation {name} failed: {status:?}"),
            _ => {}
        }
        if status != last {
            eprintln!("==> MachineOperation {name}: {status:?}");
            last = status;
        }
        ensure!(
            started.elapsed() < deadline,
            "MachineOperation {name} did not complete in {deadline:?}; last status {last:?}"
        );
        std::thread::sleep(scenarios::cluster::API_POLL);
    }
}

/// `NodeReboot` → the daemon's managed reboot: `Complete`, the bootID changed, the Node Ready,
/// a ClusterFirst pod resolving through the cluster listener.
fn a_node_reboot_operation_reboots_the_node(node: &mut JoinedNode, machine: &str) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();
    let old = node_boot_id(node)?;
    ensure!(!old.is_empty(), "the Node reports no bootID before the reboot");
    let status = run_operation(
        node,
        operation("reboot-by-daemon", machine, OperationKind::NodeReboot),
        node.deadline(10),
    )?;
    ensure!(
        status.started_at.is_some() && status.completed_at.is_some(),
        "a finished operation has startedAt and completedAt: {status:?}"
    );
    let new = wait_new_boot_id(node, &old)?;
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    eprintln!("==> NodeReboot: bootID {old} -> {new}, Node Ready");
    a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)
}

/// The MachineConfiguration's template turns LocalDNS off: the daemon applies it in place (nothing
/// of LocalDNS left, the machine resolving through the host's resolver, pods through
/// `Cluster.ClusterDNS`); then on again (link, table, network unit, the machine resolving through
/// the node listener, pods through the cluster listener). The Node stays Ready, a running pod
/// keeps running, and the Machine's `ConfigDrift` condition says each was applied.
fn a_configuration_change_turns_localdns_off_and_on_through_the_daemon(
    node: &mut JoinedNode,
    machine: &str,
) -> anyhow::Result<()> {
    let config: serde_json::Value = serde_json::from_str(&node.vm.run(&format!("cat {CONFIG}"))?)?;
    let cluster_dns: std::net::Ipv4Addr = config["Cluster"]["ClusterDNS"]
        .as_str()
        .context("the config has no Cluster.ClusterDNS")?
        .parse()?;
    // A running pod must survive both changes (kubelet restarts, containers do not).
    // In slot kube1 (`machine` is the Machina Machine's name; the repave to kube2 comes later).
    let sleeper = start_sleeper(node, "kube1", "daemon-sleeper", RestartPolicy::Never)?;
    for enabled in [false, true] {
        let started = Instant::now();
        set_localdns_in_the_configuration(node, enabled)?;
        wait_until_applied(node, machine, enabled)?;
        eprintln!(
            "==> MachineConfiguration LocalDNS {}: applied by the daemon in {:.1}s",
            if enabled { "on" } else { "off" },
            started.elapsed().as_secs_f64()
        );
        let name = node.deployed.name.clone();
        node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
        let slot = node.machine()?;
        let what = if enabled {
            "LocalDNS turned on"
        } else {
            "LocalDNS turned off"
        };
        ensure_sleeper_survived(
            node,
            "daemon-sleeper",
            &sleeper,
            &format!("while the daemon had {what}"),
        )?;
        if enabled {
            ensure_localdns_present(&node.vm, &slot)?;
            a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)?;
        } else {
            ensure_localdns_absent(&node.vm, &slot)?;
            let host = ResolvConf::parse(&node.vm.run("cat /etc/resolv.conf")?);
            let machine = ResolvConf::parse(&machine_resolv_conf(&node.vm, &slot)?);
            ensure!(
                machine.nameservers() == host.nameservers(),
                "with LocalDNS off the machine's resolver should be the host's {:?}, it is {:?}",
                host.nameservers(),
                machine.nameservers()
            );
            a_cluster_first_pod_resolves_the_kubernetes_service_through(node, cluster_dns)?;
        }
    }
    Ok(())
}

fn set_localdns_in_the_configuration(node: &JoinedNode, enabled: bool) -> anyhow::Result<()> {
    let patch = Patch::Merge(serde_json::json!({
        "spec": {"template": {"agent": {"localDNS": {"enabled": enabled}}}}
    }));
    node.block_on(Api::<MachineConfiguration>::all(node.client.clone()).patch(
        CONFIGURATION,
        &PatchParams::default(),
        &patch,
    ))
    .with_context(|| format!("patching MachineConfiguration {CONFIGURATION}"))?;
    Ok(())
}

/// Waits until the active slot's applied config has LocalDNS `enabled`, no operation is under way
/// and the Machine's `ConfigDrift` condition says `Applied`.
fn wait_until_applied(node: &JoinedNode, machine: &str, enabled: bool) -> anyhow::Result<()> {
    scenarios::daemon_apply::wait_until_applied(
        node,
        machine,
        &format!("LocalDNS enabled={enabled}"),
        |applied| applied["LocalDNS"]["Enabled"].as_bool() == Some(enabled),
    )
}

/// The Node deleted (the configuration's `updateStrategy` is the default `OnDelete`): the daemon
/// repaves to the other slot; the Machine's `NodeDeletedRepave` condition says `Repaved`, the
/// Node is back and Ready, one machine runs — the other slot — and the old slot's rootfs is gone,
/// and a pod resolves through the cluster listener.
fn deleting_the_node_repaves_it_to_the_other_slot(
    node: &mut JoinedNode,
    machine: &str,
) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();
    let from = node.machine()?;
    let guest_since = node.vm.run("date +%s")?.trim().to_owned();
    let started = Instant::now();
    node.block_on(
        Api::<k8s_openapi::api::core::v1::Node>::all(node.client.clone()).delete(&name, &Default::default()),
    )
    .with_context(|| format!("deleting Node {name}"))?;
    let machines: Api<Machine> = Api::all(node.client.clone());
    let deadline = Instant::now() + node.deadline(10);
    loop {
        let condition = node
            .block_on(machines.get(machine))?
            .status
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "NodeDeletedRepave"));
        match condition {
            Some(c) if c.reason == "Repaved" => break,
            Some(c) if c.status == "False" => {
                anyhow::bail!("the repave after the Node's deletion failed: {}", c.message)
            }
            other => ensure!(
                Instant::now() < deadline,
                "no repave within {:?} of the Node's deletion; NodeDeletedRepave {other:?}",
                node.deadline(10)
            ),
        }
        std::thread::sleep(scenarios::cluster::API_POLL);
    }
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    let to = node.machine()?;
    ensure!(to != from, "the node still runs in {from} after the repave");
    let old_rootfs = node
        .vm
        .run_unchecked(&format!("test -e /var/lib/machines/{from} && echo present"))?
        .stdout_text();
    ensure!(
        old_rootfs.trim().is_empty(),
        "the old slot's rootfs /var/lib/machines/{from} is still there"
    );
    eprintln!(
        "==> Node deleted: repaved by the daemon from {from} to {to}, Node Ready, in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    // The repave's timeline, from the daemon's own journal: where its time went.
    let timeline = node
        .vm
        .run_unchecked(&format!(
            "journalctl -u {UNIT} -u systemd-nspawn@{from}.service --no-pager -o short-precise --since @{guest_since}"
        ))?
        .stdout_text();
    eprintln!("==> the daemon's and {from}'s journal since the Node's deletion:\n{timeline}");
    a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)
}

/// The same `apply` again: nothing of the daemon's changes and its process keeps running.
fn a_second_apply_leaves_the_daemon_and_coredns_alone(node: &JoinedNode) -> anyhow::Result<()> {
    let pid = |node: &JoinedNode| -> anyhow::Result<String> {
        Ok(node
            .vm
            .run(&format!("systemctl show -p MainPID --value {UNIT}"))?
            .trim()
            .to_owned())
    };
    // CoreDNS in the running slot: its install record lets the apply keep it.
    let coredns = |node: &JoinedNode| -> anyhow::Result<String> {
        let found = node.vm.run(&format!(
            "stat -c '%n %i %Y' /var/lib/machines/kube*{} 2>/dev/null || true",
            agent::paths::COREDNS_BINARY
        ))?;
        ensure!(
            !found.trim().is_empty(),
            "no CoreDNS binary in /var/lib/machines/kube*"
        );
        Ok(found)
    };
    let before = pid(node)?;
    let binary_before = coredns(node)?;
    let out = agent(node, &format!("apply --config {CONFIG}"))?;
    ensure!(
        !out.contains("daemon: "),
        "an apply with the same config touched the daemon:\n{out}"
    );
    let after = pid(node)?;
    ensure!(
        before == after && before != "0",
        "the daemon's MainPID went {before} -> {after}"
    );
    let binary_after = coredns(node)?;
    ensure!(
        binary_before == binary_after && !out.contains("installed CoreDNS"),
        "an apply with the same config installed CoreDNS again ({binary_before:?} -> {binary_after:?}):\n{out}"
    );
    Ok(())
}

/// `AgentReset` → `Complete`, then the daemon has ended and nothing of the agent's is left:
/// `reset --dry-run` finds nothing, the unit is unknown, no machine runs, and the host listing
/// (files, units, links, nft tables, machines, mounts) equals the one taken before `start` once
/// the scenario's own config file is gone.
fn an_agent_reset_operation_removes_the_agent(
    node: &JoinedNode,
    machine: &str,
    before: &HostListing,
) -> anyhow::Result<()> {
    let status = run_operation(
        node,
        operation("reset-by-daemon", machine, OperationKind::AgentReset),
        node.deadline(5),
    )?;
    ensure!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.contains("nothing of the agent's is left")),
        "{status:?}"
    );
    let deadline = Instant::now() + node.deadline(1);
    loop {
        let state = node
            .vm
            .run_unchecked(&format!("systemctl show -p LoadState,ActiveState --value {UNIT}"))?
            .stdout_text();
        if state.split_whitespace().collect::<Vec<_>>() == ["not-found", "inactive"] {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{UNIT} is still there after the reset: {state:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let dry = node
        .vm
        .run(&format!("{} reset --dry-run 2>&1", node.deployed.guest_agent))?;
    ensure!(
        dry.contains("nothing of the agent's is on this host"),
        "the reset left something:\n{dry}"
    );
    let machines = node.vm.run("machinectl list --no-legend")?;
    ensure!(machines.trim().is_empty(), "machines still run: {machines}");
    node.vm.run(&format!("rm {CONFIG_WITHOUT_DAEMON}"))?;
    HostListing::take(&node.vm)?
        .without_the_deployed_config()
        .ensure_same_as(before, "after the AgentReset")?;
    eprintln!("==> AgentReset: the daemon ended and nothing of the agent's is left");
    Ok(())
}
