//! Scenarios of the node's life on a joined LocalDNS node (docs/lifecycle.md): a managed reboot,
//! LocalDNS turned off and on again in place, a reboot of the host itself; a repave to the other
//! slot and back; a reset that leaves the host as it was before `start`, also after a reboot, and
//! a `start` that joins the node again. After each step the Node is Ready and pods resolve through
//! the listeners the design assigns (or `Cluster.ClusterDNS` with LocalDNS off).
//!
//! Four cases: the operations run one after another on the same node, so the suite pays for one
//! node per case, not one per operation, and each node is resumed from its node config's
//! checkpoint (the reset case compares with the host listing the checkpoint's build took before
//! its deploy). The repaves and the resets are two cases, not one: together they ran past the
//! 60 minutes a lifecycle case gets beside a second VM under TCG, and apart they run side by side.

use std::net::{IpAddr, Ipv4Addr};

use agent::install_state::Stage;
use anyhow::{Context, ensure};
use scenarios::cluster::wait_node_ready;
use scenarios::cni_results::{empty_cni_results_of, ensure_ran_again_without_its_empty_cni_results};
use scenarios::conntrack_burst::listener_queries_leave_no_conntrack_entries;
use scenarios::dns::{CLUSTER_LISTENER, ResolvConf, in_machine, machine_resolv_conf};
use scenarios::host_listing::HostListing;
use scenarios::host_state::{
    ensure_localdns_absent, ensure_localdns_present, existing_paths, unit_properties,
};
use scenarios::lifecycle::{
    Killed, RestartPolicy, agent, ensure_localdns_ready_before_kubelet, ensure_sleeper_survived,
    ensure_status_after, kill_agent_in, kill_agent_in_any_or_see_it_finish, kill_agent_in_or_see_it_finish,
    node_boot_id, run_case_listing_the_host_first, start_sleeper, wait_new_boot_id,
};
use scenarios::listener_probe::ListenerProbe;
use scenarios::node::JoinedNode;
use scenarios::pod_dns::{
    a_cluster_first_pod_resolves_the_kubernetes_service_through,
    a_default_pod_resolves_through_the_node_listener,
};

const CONFIG: &str = harness::deploy::plan::GUEST_CONFIG;
const CONFIG_OFF: &str = "/etc/unbounded/agent/config-localdns-off.json";
/// The pod that runs through LocalDNS off and on and the host's reboot.
const SLEEPER: &str = "lifecycle-sleeper";

fn node_config() -> std::path::PathBuf {
    harness::repo::root().join("node-configs/localdns.json")
}

#[test]
fn a_node_reboots_turns_localdns_off_and_on_in_place_and_survives_a_host_reboot() -> anyhow::Result<()> {
    JoinedNode::run_case(&node_config(), |node| {
        let name = node.deployed.name.clone();
        node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
        an_upstream_change_is_taken_live_and_kept_by_a_restart_and_a_managed_reboot(node)?;
        a_rebuilt_agent_restarts_localdns_and_an_unchanged_one_does_not(node)?;
        // After the reboot (which restarts every container): it must survive LocalDNS off and on,
        // and run again after the host's reboot although its CNI results were left empty.
        let sleeper = start_sleeper(node, "kube1", SLEEPER, RestartPolicy::Always)?;
        localdns_off_in_place(node, &sleeper)?;
        localdns_on_in_place(node, &sleeper)?;
        host_reboot(node, &sleeper)
    })
}

#[test]
fn a_node_repaves_to_kube2_and_back_also_when_killed_in_each_phase() -> anyhow::Result<()> {
    JoinedNode::run_case(&node_config(), |node| {
        let name = node.deployed.name.clone();
        node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
        repave(node, "kube1", "kube2")?;
        repave_killed_in_each_phase_then_run_again(node, "kube2", "kube1")
    })
}

#[test]
fn reset_leaves_the_host_as_before_start_and_a_start_killed_in_each_stage_joins_again() -> anyhow::Result<()>
{
    run_case_listing_the_host_first(&node_config(), |node, before| {
        let name = node.deployed.name.clone();
        node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
        // The node as an uninterrupted `start` left it (after a pod ran: CNI's link and tables).
        a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)?;
        let uninterrupted = HostListing::take(&node.vm)?.outside_the_machines();
        reset_and_start_again(node, before, &uninterrupted)
    })
}

/// An offline node (its artifacts from the bundle on the VM, no route to the artifact server)
/// repaves to the other slot with the same checks as online, and the artifact server logs no
/// request (checked after every offline case, with its positive control).
#[test]
fn an_offline_node_repaves_without_a_request_to_the_artifact_server() -> anyhow::Result<()> {
    JoinedNode::run_case(&scenarios::node_config("localdns-offline.json"), |node| {
        let name = node.deployed.name.clone();
        node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
        repave(node, "kube1", "kube2")
    })
}

/// Upstreams are taken live (docs/design.md §3): the VM's resolver moves from the lab's upstream
/// to its second address (the same server, whose log says which address a query arrived at);
/// `unbounded-localdns-upstreams.path` sees it and the machine's Corefile names the new one
/// (the refresh logs old → new) without a restart of `localdns.service` (a reload: same main
/// PID), containerd or kubelet; the machine's lookup reaches only the new address; after
/// `systemctl restart localdns` too, and after `unbounded-agent reboot` a `Default` pod's lookup
/// through the node listener as well. (The host's boot: [`host_reboot`].)
fn an_upstream_change_is_taken_live_and_kept_by_a_restart_and_a_managed_reboot(
    node: &mut JoinedNode,
) -> anyhow::Result<()> {
    let (old, new) = (node.lab.addrs().bridge_ip(), node.lab.addrs().second_dns_ip());
    let before = running_units(node)?;
    move_resolver(node, old, new)?;
    until_upstreams_are(
        node,
        new,
        "unbounded-localdns-upstreams.service",
        Some("reloaded localdns.service in kube1"),
    )?;
    let after = running_units(node)?;
    ensure!(
        after == before,
        "taking the new upstream restarted something: before {before:?}, after {after:?}"
    );
    eprintln!("==> taken live: the supervisor, containerd and kubelet run on as before");
    machine_asks_only(
        node,
        "upstream-live",
        Ipv4Addr::new(10, 77, 1, 3),
        new,
        "taken live",
    )?;

    let (code, out) = node.machine_systemctl("kube1", "restart localdns.service")?;
    ensure!(
        code == Some(0),
        "restarting localdns.service failed ({code:?}):\n{out}"
    );
    machine_asks_only(
        node,
        "upstream-kept",
        Ipv4Addr::new(10, 77, 1, 1),
        new,
        "after `systemctl restart localdns`",
    )?;

    managed_reboot(node)?;
    let moved_name = format!("upstream-moved-{}.lab.test.", std::process::id());
    let moved_ip = Ipv4Addr::new(10, 77, 1, 2);
    node.lab.dns().set_a(&moved_name, &[moved_ip], 300)?;
    a_default_pod_resolves_through_the_node_listener(node, &moved_name, moved_ip)?;
    ensure_only_asked(node, &moved_name, new, "after the managed reboot")
}

/// `localdns.service`'s main PID and invocation, containerd's and kubelet's invocations in kube1.
fn running_units(node: &JoinedNode) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for (unit, properties) in [
        ("localdns.service", &["MainPID", "InvocationID"][..]),
        ("containerd.service", &["InvocationID"][..]),
        ("kubelet.service", &["InvocationID"][..]),
    ] {
        let props = unit_properties(&node.vm, Some("kube1"), unit, properties)?;
        out.push(format!("{unit} {props:?}"));
    }
    Ok(out)
}

/// Writes the VM's resolv.conf with `to` in place of `from` as its nameserver.
fn move_resolver(node: &JoinedNode, from: Ipv4Addr, to: Ipv4Addr) -> anyhow::Result<()> {
    let text = node.vm.run("cat /etc/resolv.conf")?;
    ensure!(
        ResolvConf::parse(&text).nameservers() == [from.to_string()],
        "the VM's resolver should be {from} before the change:\n{text}"
    );
    let moved: String = text
        .lines()
        .map(|l| match l.split_whitespace().next() {
            Some("nameserver") => format!("nameserver {to}\n"),
            _ => format!("{l}\n"),
        })
        .collect();
    node.vm.write_file("/etc/resolv.conf", moved.as_bytes(), 0o644)?;
    eprintln!("==> the VM's resolver moved from {from} to {to}");
    Ok(())
}

/// Waits until the machine's `node-upstreams` names `upstream` alone and `unit`'s journal of
/// this boot has the refresh's line ending in it (and then `then`: the reload done).
fn until_upstreams_are(
    node: &JoinedNode,
    upstream: Ipv4Addr,
    unit: &str,
    then: Option<&str>,
) -> anyhow::Result<()> {
    let path = format!("/var/lib/machines/kube1{}", agent::paths::NODE_UPSTREAMS);
    let line = format!("→ {upstream}");
    let said = |journal: &str| {
        journal
            .find(&line)
            .is_some_and(|at| then.is_none_or(|then| journal[at..].contains(then)))
    };
    harness::wait::wait_until::<_, anyhow::Error>(
        format!("VM {}", node.deployed.name),
        node.deadline(2),
        format!("{path} naming {upstream} and `{line}` (then {then:?}) in {unit}'s journal"),
        || {
            let file = node
                .vm
                .run_unchecked(&format!("cat {path}"))
                .map(|o| o.stdout_text());
            let journal = node
                .vm
                .run_unchecked(&format!("journalctl -b -u {unit} -o cat --no-pager"))
                .map(|o| o.stdout_text());
            match (file, journal) {
                (Ok(file), Ok(journal)) if file.trim() == upstream.to_string() && said(&journal) => {
                    harness::wait::Attempt::Ready(())
                }
                (Ok(file), Ok(journal)) => harness::wait::retry(format!(
                    "node-upstreams {:?}, journal ends {:?}",
                    file.trim(),
                    journal.lines().last().unwrap_or_default()
                )),
                (Err(err), _) | (_, Err(err)) => harness::wait::retry(err),
            }
        },
    )?;
    eprintln!("==> the machine's upstreams are {upstream} ({unit}: `... {line}`)");
    Ok(())
}

/// The machine resolves a new lab name (`getent`) and the lab's DNS got its queries only at
/// `server`.
fn machine_asks_only(
    node: &JoinedNode,
    label: &str,
    ip: Ipv4Addr,
    server: Ipv4Addr,
    when: &str,
) -> anyhow::Result<()> {
    let name = format!("{label}-{}.lab.test.", std::process::id());
    node.lab.dns().set_a(&name, &[ip], 300)?;
    let answer = node
        .vm
        .run(&in_machine("kube1", &format!("getent ahostsv4 {name}")))?;
    ensure!(
        answer.contains(&ip.to_string()),
        "the machine did not resolve {name} through the node listener {when}:\n{answer}"
    );
    ensure_only_asked(node, &name, server, when)
}

/// Every query for `name` the lab's DNS server received arrived at `server`, and there was one.
fn ensure_only_asked(node: &JoinedNode, name: &str, server: Ipv4Addr, when: &str) -> anyhow::Result<()> {
    let asked: Vec<_> = node
        .lab
        .dns()
        .queries()
        .into_iter()
        .filter(|q| q.name == name)
        .collect();
    ensure!(
        !asked.is_empty(),
        "no query for {name} reached the lab's DNS {when}"
    );
    let elsewhere: Vec<_> = asked
        .iter()
        .filter(|q| q.server.ip() != IpAddr::V4(server))
        .collect();
    ensure!(
        elsewhere.is_empty(),
        "{when} the node listener should ask only {server} for {name}, yet: {elsewhere:?}"
    );
    eprintln!("==> {when}: {} queries for {name}, all at {server}", asked.len());
    Ok(())
}

/// `unbounded-agent reboot`: the machine boots anew (the Node's bootID changes), LocalDNS is ready
/// before containerd and kubelet start, the Node is Ready and pods resolve through the listener.
fn managed_reboot(node: &mut JoinedNode) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();
    let old = node_boot_id(node)?;
    ensure!(!old.is_empty(), "the Node reports no bootID before the reboot");
    let out = agent(node, "reboot")?;
    ensure!(
        out.contains("reboot: step render-localdns") && out.contains("reboot: step stop-node"),
        "reboot did not run its steps:\n{out}"
    );
    let new = wait_new_boot_id(node, &old)?;
    eprintln!("==> managed reboot: bootID {old} -> {new}");
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    ensure_localdns_ready_before_kubelet(&node.vm, "kube1")?;
    ensure_status_after(node, "reboot", "kube1")?;
    a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)
}

/// `start` by an agent binary with other bytes replaces the supervisor in the machine and
/// restarts `localdns.service` (a new invocation) bridged by `localdns-bridge.service`, every
/// lookup of both listeners made meanwhile answered; `start` again by the same binary leaves it
/// be.
fn a_rebuilt_agent_restarts_localdns_and_an_unchanged_one_does_not(
    node: &mut JoinedNode,
) -> anyhow::Result<()> {
    let invocation = |node: &JoinedNode| -> anyhow::Result<String> {
        let props = unit_properties(&node.vm, Some("kube1"), "localdns.service", &["InvocationID"])?;
        props
            .get("InvocationID")
            .filter(|v| !v.is_empty())
            .cloned()
            .context("localdns.service has no InvocationID")
    };
    let rebuilt = "/usr/local/bin/unbounded-agent-rebuilt";
    // One more byte after the ELF image: the same program, another digest.
    node.vm.run(&format!(
        "cp {} {rebuilt} && printf '\\0' >> {rebuilt}",
        node.deployed.guest_agent
    ))?;
    let start = format!("start --config {CONFIG}");
    let first = invocation(node)?;
    // Both listeners asked throughout the restart: the bridge answers while it lasts.
    let probe = ListenerProbe::start(&node.vm)?;
    let out = node
        .vm
        .cmd(&format!("{rebuilt} {start} 2>&1"))
        .timeout(node.deadline(5))
        .run()?;
    let probed = probe.finish(&node.vm)?;
    let text = out.stdout_text();
    ensure!(
        text.contains("replaced the LocalDNS supervisor")
            && text.contains("localdns-bridge.service answers on the listeners beside CoreDNS")
            && text.contains("stopped localdns-bridge.service"),
        "a rebuilt agent's start did not replace the supervisor, bridged by localdns-bridge.service:\n{text}"
    );
    probed.ensure_every_lookup_answered("the bridged restart of localdns.service")?;
    eprintln!(
        "==> {} lookups of the listeners during the bridged restart ({:.0?}), all answered",
        probed.lookups, probed.took
    );
    let second = invocation(node)?;
    ensure!(second != first, "localdns.service was not restarted ({first})");
    let text = node
        .vm
        .cmd(&format!("{rebuilt} {start} 2>&1"))
        .timeout(node.deadline(5))
        .run()?
        .stdout_text();
    ensure!(
        text.contains("nothing changed"),
        "the same agent's second start changed something:\n{text}"
    );
    ensure!(
        invocation(node)? == second,
        "an unchanged agent restarted localdns.service"
    );
    // Back to the deployed agent (its supervisor again), and away with the other binary.
    agent(node, &start)?;
    node.vm.run(&format!("rm {rebuilt}"))?;
    eprintln!("==> a rebuilt agent restarted localdns.service once; an unchanged one left it alone");
    Ok(())
}

fn cluster_dns(node: &JoinedNode) -> anyhow::Result<Ipv4Addr> {
    let text = node.vm.run(&format!("cat {CONFIG}"))?;
    let config: serde_json::Value = serde_json::from_str(&text)?;
    config["Cluster"]["ClusterDNS"]
        .as_str()
        .context("the deployed config has no Cluster.ClusterDNS")?
        .parse()
        .context("Cluster.ClusterDNS is not IPv4")
}

/// `apply` with LocalDNS off: nothing of LocalDNS is left on the host or in the machine, the
/// machine's resolver is the host's, ClusterFirst pods resolve through `Cluster.ClusterDNS`, the
/// Node stays Ready and a running pod keeps running.
fn localdns_off_in_place(node: &mut JoinedNode, sleeper: &str) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();
    let text = node.vm.run(&format!("cat {CONFIG}"))?;
    let mut config: serde_json::Value = serde_json::from_str(&text)?;
    config["LocalDNS"]["Enabled"] = serde_json::Value::Bool(false);
    node.vm.write_file(
        CONFIG_OFF,
        serde_json::to_string_pretty(&config)?.as_bytes(),
        0o600,
    )?;
    let out = agent(node, &format!("apply --config {CONFIG_OFF}"))?;
    ensure!(
        out.contains("apply: step reconfigure"),
        "apply did not reconfigure:\n{out}"
    );
    ensure_localdns_absent(&node.vm, "kube1")?;
    let host = ResolvConf::parse(&node.vm.run("cat /etc/resolv.conf")?);
    let machine = ResolvConf::parse(&machine_resolv_conf(&node.vm, "kube1")?);
    ensure!(
        machine.nameservers() == host.nameservers(),
        "with LocalDNS off the machine's resolver should be the host's {:?}, it is {:?}",
        host.nameservers(),
        machine.nameservers()
    );
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    ensure_sleeper_survived(node, SLEEPER, sleeper, "while LocalDNS was turned off")?;
    a_cluster_first_pod_resolves_the_kubernetes_service_through(node, cluster_dns(node)?)?;
    let again = agent(node, &format!("apply --config {CONFIG_OFF}"))?;
    ensure!(
        again.contains("nothing changed"),
        "a second apply of the same config changed something:\n{again}"
    );
    Ok(())
}

/// `apply` with LocalDNS on again: link, table and unit are back, the machine resolves through the
/// node listener, ClusterFirst pods through the cluster listener; the pod kept running.
fn localdns_on_in_place(node: &mut JoinedNode, sleeper: &str) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();
    let out = agent(node, &format!("apply --config {CONFIG}"))?;
    ensure!(
        out.contains("started localdns.service"),
        "apply did not start LocalDNS:\n{out}"
    );
    ensure_localdns_present(&node.vm, "kube1")?;
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    ensure_sleeper_survived(node, SLEEPER, sleeper, "while LocalDNS was turned on")?;
    a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)
}

/// The VM itself reboots: with no agent run, the network unit brings back link and table, the
/// machine starts from `machines.target`, LocalDNS is ready before kubelet, the Node is Ready,
/// pods resolve, and a burst of pod queries leaves no conntrack entry for the listeners. The
/// sleeper (container `sleeper`) goes down with the host as if its sandbox's CNI results had
/// just been written when the power went (emptied), and runs again in a new sandbox. The VM's
/// resolver moved back to the lab's first address while the upstreams' path unit was stopped
/// (so not taken live) is taken at the boot: the network unit's refresh says so, and the
/// machine's lookups reach only that address.
fn host_reboot(node: &mut JoinedNode, sleeper: &str) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();
    let emptied = empty_cni_results_of(node, "kube1", SLEEPER)?;
    let (first, second) = (node.lab.addrs().bridge_ip(), node.lab.addrs().second_dns_ip());
    node.vm.run(&format!(
        "systemctl stop {}",
        agent::paths::UPSTREAMS_PATH_UNIT_NAME
    ))?;
    move_resolver(node, second, first)?;
    let old = node_boot_id(node)?;
    node.vm.reboot().context("rebooting the VM")?;
    let new = wait_new_boot_id(node, &old)?;
    eprintln!("==> host reboot: the Node's bootID {old} -> {new}");
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    until_upstreams_are(node, first, agent::paths::NETWORK_UNIT_NAME, None)?;
    machine_asks_only(
        node,
        "upstream-boot",
        Ipv4Addr::new(10, 77, 1, 4),
        first,
        "after the host's boot",
    )?;
    ensure_localdns_present(&node.vm, "kube1")?;
    ensure_localdns_ready_before_kubelet(&node.vm, "kube1")?;
    a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)?;
    listener_queries_leave_no_conntrack_entries(node)?;
    ensure_ran_again_without_its_empty_cni_results(node, "kube1", SLEEPER, sleeper, &emptied)
}

/// `unbounded-agent repave` from `from` to `to`: the Node keeps its name and is Ready, the
/// machine runs in `to`, nothing of `from` is left, LocalDNS is wired for `to`.
fn repave(node: &mut JoinedNode, from: &str, to: &str) -> anyhow::Result<()> {
    let old = node_boot_id(node)?;
    let out = agent(node, "repave")?;
    for phase in [
        "preparing",
        "switching",
        "starting",
        "verifying",
        "committed",
        "cleaning",
    ] {
        ensure!(
            out.contains(&format!("repave: step {phase}")),
            "repave skipped {phase}:\n{out}"
        );
    }
    ensure_repaved(node, from, to, &old)
}

/// A repave killed with SIGKILL in each of its phases in turn, each kill followed by a run that
/// re-enters the recorded phase (the next kill catches it in the next phase), then one run to
/// the end: the node ends in `to` only, as after an uninterrupted repave. A `cleaning` too quick
/// to catch is reported and the repave counts as finished.
fn repave_killed_in_each_phase_then_run_again(
    node: &mut JoinedNode,
    from: &str,
    to: &str,
) -> anyhow::Result<()> {
    let old = node_boot_id(node)?;
    let mut finished = false;
    let phases = ["preparing", "switching", "starting", "verifying", "cleaning"];
    for (i, phase) in phases.iter().enumerate() {
        let marker = format!("\"phase\": \"{phase}\"");
        // Each run after a kill re-enters the phase the kill interrupted.
        let resumed = format!("repave: steps {}", phases[i.saturating_sub(1)]);
        match kill_agent_in_or_see_it_finish(node, "repave", agent::paths::REPAVE_STATE, &marker)? {
            Killed::At(printed) => ensure!(
                printed.contains(&resumed),
                "the run killed in {phase} did not start at its recorded phase ({resumed:?}):\n{printed}"
            ),
            Killed::FinishedFirst(printed) => {
                ensure!(
                    *phase == "cleaning" && printed.contains("repave: done"),
                    "the repave ended before it reached {phase}:\n{printed}"
                );
                finished = true;
            }
        }
    }
    if !finished {
        let out = agent(node, "repave")?;
        ensure!(
            out.contains("repave: steps cleaning → finish-repave"),
            "the last repave did not resume at cleaning:\n{out}"
        );
    }
    ensure_repaved(node, from, to, &old)
}

/// After a repave from `from` to `to`: the Node keeps its name and is Ready with a new bootID, the
/// machine runs in `to`, nothing of `from` is left, LocalDNS is wired for `to`.
fn ensure_repaved(node: &mut JoinedNode, from: &str, to: &str, old: &str) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();
    ensure!(node.machine()? == to, "after the repave the machine is not {to}");
    wait_new_boot_id(node, old)?;
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    let slot = scenarios::host_state::slot(from);
    let override_dir = agent::paths::nspawn_override(slot);
    let left = existing_paths(
        &node.vm,
        &[
            agent::paths::rootfs(slot),
            agent::paths::nspawn_settings(slot),
            override_dir.trim_end_matches("/override.conf").to_string(),
            agent::paths::applied_config(slot),
            agent::paths::machine_enablement_link(slot),
            agent::paths::REPAVE_STATE.into(),
        ],
    )?;
    ensure!(left.is_empty(), "the repave to {to} left {left:?}");
    ensure_localdns_present(&node.vm, to)?;
    ensure_localdns_ready_before_kubelet(&node.vm, to)?;
    a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)
}

/// `reset` returns the host to the listing taken before `start`, also after a reboot and after a
/// `start` killed while the machine comes up; then a `start` killed in each of its stages in turn
/// and run again joins the node again, as an uninterrupted `start` left it.
fn reset_and_start_again(
    node: &mut JoinedNode,
    before: &HostListing,
    uninterrupted: &HostListing,
) -> anyhow::Result<()> {
    let dry = agent(node, "reset --dry-run")?;
    ensure!(
        dry.contains("would remove /var/lib/machines/kube1"),
        "the dry run does not name the machine:\n{dry}"
    );
    agent(node, "reset")?;
    HostListing::take(&node.vm)?
        .without_the_deployed_config()
        .ensure_same_as(before, "after reset")?;
    let again = agent(node, "reset")?;
    ensure!(
        again.contains("nothing of the agent's was on this host"),
        "a second reset found something:\n{again}"
    );
    node.vm.reboot().context("rebooting the VM after reset")?;
    HostListing::take(&node.vm)?
        .without_the_deployed_config()
        .ensure_same_as(before, "after reset and a reboot")?;
    // A half-started host: `start` killed while the machine comes up, then reset.
    kill_agent_in(
        node,
        &format!("start --config {CONFIG}"),
        agent::paths::INSTALL_STATE,
        "\"starting-node\"",
    )?;
    agent(node, "reset")?;
    HostListing::take(&node.vm)?
        .without_the_deployed_config()
        .ensure_same_as(before, "after a reset of a half-started node")?;
    start_killed_in_each_stage_then_run_again(node)?;
    let name = node.deployed.name.clone();
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    ensure_localdns_present(&node.vm, "kube1")?;
    a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)?;
    HostListing::take(&node.vm)?
        .outside_the_machines()
        .ensure_same_as(uninterrupted, "after a start killed in each stage and run again")
}

/// The stage the install state on the node records.
fn recorded_stage(node: &JoinedNode) -> anyhow::Result<Stage> {
    let text = node.vm.run(&format!("cat {}", agent::paths::INSTALL_STATE))?;
    let state: agent::install_state::InstallState =
        serde_json::from_str(&text).with_context(|| format!("reading the install state:\n{text}"))?;
    Ok(state.stage)
}

/// Fails unless the steps `printed` names start at `stage` (a stage recorded before a kill): it
/// re-enters that stage and runs none before it (preflight, which changes nothing, may run again).
fn ensure_resumed_at(printed: &str, stage: Stage) -> anyhow::Result<()> {
    let steps = printed
        .lines()
        .find_map(|l| l.split_once("start: steps "))
        .map(|(_, steps)| steps.split(" → ").map(str::trim).collect::<Vec<_>>())
        .with_context(|| format!("the run after the kill printed no steps:\n{printed}"))?;
    let earlier: Vec<&str> = Stage::ALL
        .iter()
        .take_while(|s| **s != stage)
        .map(|s| s.as_str())
        .filter(|s| steps.contains(s))
        .collect();
    ensure!(
        steps.contains(&stage.as_str()) && earlier.is_empty(),
        "killed in {}, the next run should re-enter it and nothing before it; its steps: {steps:?}",
        stage.as_str()
    );
    Ok(())
}

/// `start` on a reset host killed with SIGKILL in each of its stages in turn (the next kill waits
/// for the stage after the one the last kill was recorded in; a stage too quick to catch is
/// skipped, and the stages caught are printed), each run after a kill re-entering the recorded
/// stage, then one run to the end.
fn start_killed_in_each_stage_then_run_again(node: &mut JoinedNode) -> anyhow::Result<()> {
    let start = format!("start --config {CONFIG}");
    let mut caught: Vec<Stage> = Vec::new();
    let mut target = Stage::PreparingHost;
    let finished = loop {
        // The target stage or any later one before `complete`: a stage quicker than the polling
        // (preparing-host takes about a second) is passed by, not waited for.
        let markers: Vec<String> = Stage::ALL
            .iter()
            .filter(|s| **s >= target && **s != Stage::Complete)
            .map(|s| format!("\"{}\"", s.as_str()))
            .collect();
        let markers: Vec<&str> = markers.iter().map(String::as_str).collect();
        match kill_agent_in_any_or_see_it_finish(node, &start, agent::paths::INSTALL_STATE, &markers)? {
            Killed::At(printed) => {
                if let Some(last) = caught.last() {
                    ensure_resumed_at(&printed, *last)?;
                }
                let stage = recorded_stage(node)?;
                ensure!(
                    stage != Stage::Complete,
                    "start was killed after it recorded `complete`:\n{printed}"
                );
                caught.push(stage);
                match Stage::ALL
                    .iter()
                    .position(|s| *s == stage)
                    .map(|i| Stage::ALL[i + 1])
                {
                    Some(Stage::Complete) | None => break false,
                    Some(next) => target = next,
                }
            }
            Killed::FinishedFirst(printed) => {
                if let Some(last) = caught.last() {
                    ensure_resumed_at(&printed, *last)?;
                }
                ensure!(
                    recorded_stage(node)? == Stage::Complete,
                    "start ended before {} without completing:\n{printed}",
                    target.as_str()
                );
                break true;
            }
        }
    };
    let names: Vec<&str> = caught.iter().map(|s| s.as_str()).collect();
    eprintln!("==> start killed in {names:?}");
    for long in [Stage::PreparingRootfs, Stage::StartingNode] {
        ensure!(
            caught.contains(&long),
            "start was never killed in {} (caught: {names:?})",
            long.as_str()
        );
    }
    if !finished {
        let out = agent(node, &start)?;
        ensure_resumed_at(&out, *caught.last().context("no kill")?)?;
    }
    ensure!(
        recorded_stage(node)? == Stage::Complete,
        "the last start did not complete"
    );
    Ok(())
}
