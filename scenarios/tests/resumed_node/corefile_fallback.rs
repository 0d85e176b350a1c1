//! The `corefile_fallback` check: a Corefile CoreDNS refuses at run time leaves names resolving.
//! Through the Machine (`spec.agent.localDNS.corefileTemplate`), the daemon applies the built-in
//! template with a `cache` property CoreDNS does not know (the agent's checks do not read plugin
//! properties, CoreDNS refuses it at its start). It changes only the Corefile, so the daemon
//! reloads `localdns.service`: the reload's CoreDNS refuses it and the one before goes on serving
//! — the status line says degraded ("reload refused") with CoreDNS's reason and the machine
//! resolves. Then `localdns.service` is restarted (an operator's restart, or a host boot): its
//! CoreDNS refuses the Corefile at the start and the supervisor serves the fallback Corefile: its
//! status line and `unbounded-agent status` say degraded, naming CoreDNS's reason; the machine, a
//! `Default` pod and a `ClusterFirst` pod resolve through their listeners; the Node stays Ready.
//! The built-in template set again (the daemon overlays what the Machine names, so the template is
//! replaced, not removed), its reload ends the fallback: the full Corefile serves, nothing says
//! degraded and the Node is Ready.

use std::net::Ipv4Addr;
use std::time::Duration;

use agent::corefile::BUILTIN_TEMPLATE;
use agent::machina::Machine;
use anyhow::{Context, ensure};
use harness::wait::{Attempt, retry, wait_until};
use kube::api::{Api, Patch, PatchParams};
use scenarios::cluster::wait_node_ready;
use scenarios::daemon_apply::wait_until_applied;
use scenarios::dns::{CLUSTER_LISTENER, in_machine};
use scenarios::node::JoinedNode;
use scenarios::pod_dns::{
    a_cluster_first_pod_resolves_the_kubernetes_service_through,
    a_default_pod_resolves_through_the_node_listener,
};

/// The property CoreDNS's `cache` does not know.
const UNKNOWN_PROPERTY: &str = "no_such_property";
/// The lab names' TTL.
const TTL: u32 = 300;
/// How long the supervisor's status line may take to reach what is awaited after the apply.
const STATUS_WITHIN: Duration = Duration::from_secs(60);

/// The check this module's doc describes.
pub(crate) fn a_corefile_coredns_refuses_leaves_names_resolving_through_the_fallback(
    node: &mut JoinedNode,
) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();
    let cache = "    cache {{ zone.cache.ttl }} {\n";
    let refused = BUILTIN_TEMPLATE.replacen(cache, &format!("{cache}        {UNKNOWN_PROPERTY} 1\n"), 1);
    ensure!(
        refused != BUILTIN_TEMPLATE,
        "the built-in template has no `{}` line",
        cache.trim()
    );

    set_corefile_template(node, &refused)?;
    wait_until_applied(node, &name, "the refused Corefile template", |applied| {
        applied["LocalDNS"]["CorefileTemplate"].as_str() == Some(refused.as_str())
    })?;
    let slot = node.machine()?;
    let line = until_status_line(node, &slot, "says the reload was refused", |line| {
        line.starts_with("degraded (reload refused")
    })?;
    ensure!(
        line.contains(UNKNOWN_PROPERTY),
        "localdns.service's status line does not give CoreDNS's reason: {line:?}"
    );
    eprintln!("==> after the reload, localdns.service: {line}");
    machine_resolves(node, &slot, "reload-refused", Ipv4Addr::new(10, 77, 0, 13))?;

    // A start of the unit onto the refused Corefile: the fallback.
    let (code, out) = node.machine_systemctl(&slot, "restart localdns.service")?;
    ensure!(
        code == Some(0),
        "`systemctl restart localdns.service` in {slot} exited {code:?}: {out}"
    );
    let line = until_status_line(node, &slot, "says the fallback serves", |line| {
        line.starts_with("degraded (serving the fallback Corefile")
    })?;
    ensure!(
        line.contains(UNKNOWN_PROPERTY),
        "localdns.service's status line does not name the fallback and CoreDNS's reason: {line:?}"
    );
    eprintln!("==> after a restart, localdns.service: {line}");
    agent_status_says_degraded(node, true)?;

    let (lab_name, lab_ip) = machine_resolves(node, &slot, "fallback", Ipv4Addr::new(10, 77, 0, 11))?;
    a_default_pod_resolves_through_the_node_listener(node, &lab_name, lab_ip)?;
    a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)?;
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;

    set_corefile_template(node, BUILTIN_TEMPLATE)?;
    wait_until_applied(node, &name, "the built-in Corefile template", |applied| {
        applied["LocalDNS"]["CorefileTemplate"].as_str() == Some(BUILTIN_TEMPLATE)
    })?;
    let slot = node.machine()?;
    let line = until_status_line(node, &slot, "says the reload ended the fallback", |line| {
        line.starts_with("reloaded ") && line.contains("CoreDNS healthy")
    })?;
    eprintln!("==> with the built-in template again, localdns.service: {line}");
    agent_status_says_degraded(node, false)?;
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    Ok(())
}

/// A name set in the lab's DNS now resolves inside machine `slot` (`getent`); returns it.
fn machine_resolves(
    node: &JoinedNode,
    slot: &str,
    label: &str,
    lab_ip: Ipv4Addr,
) -> anyhow::Result<(String, Ipv4Addr)> {
    let lab_name = format!("corefile-{label}-{}.upstream.test.", std::process::id());
    node.lab.dns().set_a(&lab_name, &[lab_ip], TTL)?;
    let out = node
        .vm
        .run(&in_machine(slot, &format!("getent ahostsv4 {lab_name}")))
        .with_context(|| format!("resolving {lab_name} inside machine {slot} ({label})"))?;
    ensure!(
        out.split_whitespace().next() == Some(lab_ip.to_string().as_str()),
        "{label}: `getent ahostsv4 {lab_name}` inside {slot} should give {lab_ip}:\n{out}"
    );
    eprintln!("==> {label}: machine {slot} resolves {lab_name} -> {lab_ip}");
    Ok((lab_name, lab_ip))
}

/// Sets the Machine's `spec.agent.localDNS.corefileTemplate`.
fn set_corefile_template(node: &JoinedNode, template: &str) -> anyhow::Result<()> {
    let name = &node.deployed.name;
    let patch = Patch::Merge(serde_json::json!({
        "spec": {"agent": {"localDNS": {"corefileTemplate": template}}}
    }));
    node.block_on(Api::<Machine>::all(node.client.clone()).patch(name, &PatchParams::default(), &patch))
        .with_context(|| format!("patching Machine {name}'s corefileTemplate"))?;
    Ok(())
}

/// Waits until `localdns.service`'s status line in machine `slot` (the supervisor's `STATUS=`)
/// passes `wanted`; returns it.
fn until_status_line(
    node: &JoinedNode,
    slot: &str,
    what: &str,
    wanted: impl Fn(&str) -> bool,
) -> anyhow::Result<String> {
    wait_until::<_, anyhow::Error>(
        format!("machine {slot}"),
        STATUS_WITHIN,
        format!("localdns.service's status line {what}"),
        || match node.machine_systemctl(slot, "show localdns.service --property=StatusText --value") {
            Ok((Some(0), line)) if wanted(line.trim()) => Attempt::Ready(line.trim().to_owned()),
            Ok((_, line)) => retry(format!("status line {:?}", line.trim())),
            Err(err) => retry(err),
        },
    )
}

/// `unbounded-agent status --output json` reports LocalDNS degraded (with CoreDNS's reason) and
/// a problem, or neither.
fn agent_status_says_degraded(node: &JoinedNode, degraded: bool) -> anyhow::Result<()> {
    let out = node.vm.run_unchecked("unbounded-agent status --output json")?;
    let text = out.stdout_text();
    let status: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("`unbounded-agent status` printed:\n{text}"))?;
    let line = status["localDns"]["degraded"].as_str();
    let problem = status["problems"].as_array().is_some_and(|p| {
        p.iter()
            .any(|p| p.as_str().is_some_and(|p| p.starts_with("LocalDNS is degraded")))
    });
    if degraded {
        ensure!(
            line.is_some_and(|l| l.contains(UNKNOWN_PROPERTY)) && problem && !out.success(),
            "`unbounded-agent status` should report LocalDNS degraded with CoreDNS's reason, a problem \
             and exit non-zero; it exited {:?}:\n{text}",
            out.status
        );
    } else {
        ensure!(
            line.is_none() && !problem,
            "`unbounded-agent status` still reports LocalDNS degraded:\n{text}"
        );
    }
    eprintln!("==> `unbounded-agent status`: localDns.degraded {line:?}");
    Ok(())
}
