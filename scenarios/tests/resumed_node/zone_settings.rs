//! The `zone_settings` check: a zone's settings changed through the Machine apply in place.
//! `spec.agent.localDNS.nodeListenerOverrides` sets `queryLogging: Log` on the node listener's
//! root zone; the daemon applies it by a reload of `localdns.service` (its status line says
//! reloaded): the machine's Corefile has `log` there, a lookup in the machine is logged by
//! CoreDNS, and neither the supervisor (the unit's main process), containerd nor kubelet was
//! restarted (same main PID, same invocations). The zone taken out again (the map left empty),
//! the Corefile has no `log` and still nothing restarted.

use std::net::Ipv4Addr;
use std::time::Duration;

use agent::machina::Machine;
use anyhow::{Context, ensure};
use harness::wait::{Attempt, retry, wait_until};
use kube::api::{Api, Patch, PatchParams};
use scenarios::cluster::wait_node_ready;
use scenarios::daemon_apply::wait_until_applied;
use scenarios::dns::in_machine;
use scenarios::node::JoinedNode;

/// The lab names' TTL.
const TTL: u32 = 300;
/// How long a logged lookup may take to reach the journal.
const LOGGED_WITHIN: Duration = Duration::from_secs(30);

/// What identifies the running processes that must survive a reload.
#[derive(Debug, PartialEq, Eq)]
struct Running {
    /// `localdns.service`'s main PID (the supervisor) and invocation.
    localdns: String,
    containerd: String,
    kubelet: String,
}

impl Running {
    /// Once all three units are active (each has an invocation), what identifies them.
    fn when_active(node: &JoinedNode, slot: &str) -> anyhow::Result<Running> {
        wait_until::<_, anyhow::Error>(
            format!("machine {slot}"),
            node.deadline(2),
            "localdns, containerd and kubelet active",
            || match (Running::read(node, slot), active(node, slot)) {
                (Ok(running), Ok(true)) => Attempt::Ready(running),
                (Ok(running), Ok(false)) => retry(format!("not all active: {running:?}")),
                (Err(err), _) | (_, Err(err)) => retry(err),
            },
        )
    }

    fn read(node: &JoinedNode, slot: &str) -> anyhow::Result<Running> {
        let show = |unit: &str, properties: &str| -> anyhow::Result<String> {
            let (code, out) = node.machine_systemctl(slot, &format!("show {unit} {properties}"))?;
            ensure!(
                code == Some(0),
                "`systemctl show {unit}` in {slot} exited {code:?}: {out}"
            );
            Ok(out.split_whitespace().collect::<Vec<_>>().join(" "))
        };
        Ok(Running {
            localdns: show("localdns.service", "--property=MainPID --property=InvocationID")?,
            containerd: show("containerd.service", "--property=InvocationID")?,
            kubelet: show("kubelet.service", "--property=InvocationID")?,
        })
    }
}

/// Whether `localdns.service`, `containerd.service` and `kubelet.service` are active in `slot`.
fn active(node: &JoinedNode, slot: &str) -> anyhow::Result<bool> {
    let (code, out) = node.machine_systemctl(
        slot,
        "is-active localdns.service containerd.service kubelet.service",
    )?;
    Ok(code == Some(0) && out.lines().all(|l| l.trim() == "active"))
}

/// The check this module's doc describes.
pub(crate) fn zone_settings_set_through_the_machine_apply_in_place_by_a_reload(
    node: &mut JoinedNode,
) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();
    let slot = node.machine()?;
    // The check before may leave kubelet starting (`dns_wiring` ends with a machine restart).
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    let before = Running::when_active(node, &slot)?;

    set_node_overrides(node, serde_json::json!({".": {"queryLogging": "Log"}}))?;
    wait_until_applied(
        node,
        &name,
        "query logging on the node listener's root zone",
        |applied| applied["LocalDNS"]["NodeListenerOverrides"]["."]["QueryLogging"] == "Log",
    )?;
    let corefile = machine_corefile(node, &slot)?;
    ensure!(
        node_root_block(&corefile)?.contains("\n    log\n"),
        "the machine's Corefile has no `log` in the node listener's `.` block:\n{corefile}"
    );
    let (_, status) = node.machine_systemctl(&slot, "show localdns.service --property=StatusText --value")?;
    ensure!(
        status.trim().starts_with("reloaded "),
        "localdns.service's status line should say it reloaded: {status:?}"
    );
    eprintln!("==> localdns.service: {}", status.trim());
    let after = Running::read(node, &slot)?;
    ensure!(
        after == before,
        "applying a zone's settings restarted something: before {before:?}, after {after:?}"
    );
    eprintln!("==> the supervisor, containerd and kubelet run on as before: {after:?}");

    let lab_name = format!("zone-settings-{}.upstream.test.", std::process::id());
    let lab_ip = Ipv4Addr::new(10, 77, 0, 12);
    node.lab.dns().set_a(&lab_name, &[lab_ip], TTL)?;
    node.vm
        .run(&in_machine(&slot, &format!("getent ahostsv4 {lab_name}")))
        .with_context(|| format!("resolving {lab_name} inside machine {slot}"))?;
    let logged = format!("\"A IN {lab_name} udp");
    wait_until::<_, anyhow::Error>(
        format!("machine {slot}"),
        LOGGED_WITHIN,
        format!("CoreDNS's log line for {lab_name} in localdns.service's journal"),
        || match node.vm.run_unchecked(&in_machine(
            &slot,
            "journalctl -u localdns.service -o cat -n 2000 --no-pager",
        )) {
            Ok(out) if out.stdout_text().contains(&logged) => Attempt::Ready(()),
            Ok(_) => retry(format!("no {logged:?} in the last 2000 lines")),
            Err(err) => retry(err),
        },
    )?;
    eprintln!("==> the machine's lookup of {lab_name} is logged by CoreDNS");

    set_node_overrides(node, serde_json::json!({".": null}))?;
    wait_until_applied(node, &name, "no overrides on the node listener", |applied| {
        applied["LocalDNS"]["NodeListenerOverrides"] == serde_json::json!({})
    })?;
    let corefile = machine_corefile(node, &slot)?;
    ensure!(
        !node_root_block(&corefile)?.contains("\n    log\n"),
        "the node listener's `.` block still has `log`:\n{corefile}"
    );
    let (_, status) = node.machine_systemctl(&slot, "show localdns.service --property=StatusText --value")?;
    ensure!(
        status.trim().starts_with("reloaded "),
        "localdns.service's status line should say the second reload took over: {status:?}"
    );
    let last = Running::read(node, &slot)?;
    ensure!(
        last == before,
        "taking a zone's settings back restarted something: before {before:?}, after {last:?}"
    );
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    Ok(())
}

/// Merges `overrides` into the Machine's `spec.agent.localDNS.nodeListenerOverrides` (a JSON merge
/// patch: a zone set to `null` leaves the map).
fn set_node_overrides(node: &JoinedNode, overrides: serde_json::Value) -> anyhow::Result<()> {
    let name = &node.deployed.name;
    let patch = Patch::Merge(serde_json::json!({
        "spec": {"agent": {"localDNS": {"nodeListenerOverrides": overrides}}}
    }));
    node.block_on(Api::<Machine>::all(node.client.clone()).patch(name, &PatchParams::default(), &patch))
        .with_context(|| format!("patching Machine {name}'s nodeListenerOverrides"))?;
    Ok(())
}

/// The machine's Corefile as the agent wrote it.
fn machine_corefile(node: &JoinedNode, slot: &str) -> anyhow::Result<String> {
    let path = format!("/var/lib/machines/{slot}{}", agent::paths::COREFILE);
    Ok(node.vm.run(&format!("cat {path}"))?)
}

/// The node listener's root block of a Corefile the built-in template rendered: from its
/// comment to the next blank line.
fn node_root_block(corefile: &str) -> anyhow::Result<&str> {
    let start = corefile
        .find("# Node listener")
        .with_context(|| format!("the machine's Corefile has no `# Node listener` block:\n{corefile}"))?;
    let rest = &corefile[start..];
    Ok(&rest[..rest.find("\n\n").unwrap_or(rest.len())])
}
