//! The `dns_wiring` check: on a joined LocalDNS node, DNS goes where docs/design.md §1 and §5 say. The
//! machine's `/etc/resolv.conf` is the host's search/options plus `nameserver 169.254.10.10`
//! only, and stays so after the machine restarts (`machinectl reboot`), when the machine still
//! resolves through the node listener; kubelet's live configuration (`configz`) and its config
//! file have `clusterDNS: [169.254.10.11]` and the LocalDNS `resolvConf`; a `ClusterFirst` pod
//! resolves `kubernetes.default.svc.cluster.local` through 169.254.10.11 and a `Default` pod a
//! lab upstream name through 169.254.10.10; and the lab's upstream sees one query for a name
//! the pod looked up twice (CoreDNS's cache answered the second).
//!
//! The lab VM's resolv.conf has only a nameserver, so before the agent is deployed every
//! checkpointed node gets `search`/`options` lines in it (`harness::checkpoint::node::prepare_host`):
//! without them the "plus the host's search/options" half could not fail.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use kube::api::GetParams;
use scenarios::cluster::wait_node_ready;
use scenarios::dns::{
    CLUSTER_LISTENER, DnsPolicy, LOCALDNS_RESOLV_CONF, NODE_LISTENER, Nslookup, ResolvConf, Step, in_machine,
    lookup_pod, machine_resolv_conf, parse_framed, step,
};
use scenarios::node::JoinedNode;
use scenarios::pod_dns::{
    a_cluster_first_pod_resolves_the_kubernetes_service_through, ensure_server, run_lookup_pod,
};

/// The TTL of the lab names the scenario sets: far above CoreDNS's 30 s cache cap, so the
/// cache, not the record, decides how long an answer is kept.
const TTL: u32 = 300;

/// The check this module's doc describes.
pub(crate) fn machine_and_pods_resolve_through_the_listeners_their_dns_policy_names(
    node: &mut JoinedNode,
) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();
    the_deployed_config_keeps_the_designed_listeners(node)?;
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    let machine = node.machine()?;
    ensure!(
        machine == "kube1",
        "a first install runs in slot kube1, not {machine}"
    );
    // `unbounded-agent status` agrees: installed by `start`, LocalDNS serving on both listeners.
    scenarios::lifecycle::ensure_status_after(node, "start", "kube1")?;

    let host = String::from_utf8(node.vm.read_file("/etc/resolv.conf")?)?;
    let host = ResolvConf::parse(&host);
    // Positive control: the host's search/options are there to be carried over.
    ensure!(
        host.search() == ["lab.test"] && !host.options().is_empty(),
        "the VM's resolv.conf lost the search/options the scenario added: {:?}",
        host.lines()
    );
    let expected = host.localdns_lines_for(NODE_LISTENER);

    the_machine_resolver_is_the_node_listener_only(node, &machine, &expected, "after start")?;
    kubelet_uses_the_cluster_listener_and_the_localdns_resolv_conf(node, &machine, &name)?;
    a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)?;
    a_default_pod_resolves_a_lab_name_through_the_node_listener_asked_upstream_once(node, &name, &host)?;

    restart_the_machine(node, &machine)?;
    the_machine_resolver_is_the_node_listener_only(node, &machine, &expected, "after the machine restarted")?;
    the_machine_resolves_a_lab_name_through_the_node_listener(node, &machine)
}

/// The spec's listener addresses are what this scenario expects, so the node config must not
/// move them.
fn the_deployed_config_keeps_the_designed_listeners(node: &JoinedNode) -> anyhow::Result<()> {
    let ldns = node.deployed.config.local_dns.clone().unwrap_or_default();
    ensure!(
        ldns.enabled == Some(true),
        "dns-wiring needs LocalDNS enabled; the deployed config has {ldns:?}"
    );
    for (field, value, default) in [
        ("NodeListenerIP", &ldns.node_listener_ip, NODE_LISTENER),
        ("ClusterListenerIP", &ldns.cluster_listener_ip, CLUSTER_LISTENER),
    ] {
        ensure!(
            value.as_deref().is_none_or(|v| v == default.to_string()),
            "LocalDNS.{field} is {value:?}; this scenario checks the default {default} of docs/design.md §2"
        );
    }
    Ok(())
}

/// Spec §5: the machine's `/etc/resolv.conf` (read inside it) and the LocalDNS resolv.conf are
/// the host's lines without nameservers, then `nameserver 169.254.10.10`, nothing else.
fn the_machine_resolver_is_the_node_listener_only(
    node: &JoinedNode,
    machine: &str,
    expected: &[String],
    when: &str,
) -> anyhow::Result<()> {
    for (path, text) in [
        ("/etc/resolv.conf", machine_resolv_conf(&node.vm, machine)?),
        (
            LOCALDNS_RESOLV_CONF,
            node.vm
                .run(&in_machine(machine, &format!("cat {LOCALDNS_RESOLV_CONF}")))?,
        ),
    ] {
        let seen = ResolvConf::parse(&text);
        ensure!(
            seen.lines() == expected,
            "{when}, {path} in machine {machine} should be exactly {expected:?} (the host's \
             search/options, then the node listener), it is:\n{text}"
        );
        eprintln!("==> {when}, {path} in {machine} is {:?}", seen.lines());
    }
    Ok(())
}

/// Spec §5: `clusterDNS: [169.254.10.11]`, `resolvConf: /etc/unbounded/localdns/resolv.conf`,
/// both in what the running kubelet reports (`configz` through the API server) and in its file.
fn kubelet_uses_the_cluster_listener_and_the_localdns_resolv_conf(
    node: &JoinedNode,
    machine: &str,
    name: &str,
) -> anyhow::Result<()> {
    let request = kube::core::Request::new(format!("/api/v1/nodes/{name}/proxy"))
        .get("configz", &GetParams::default())?;
    let text = node
        .block_on(node.client.request_text(request))
        .with_context(|| format!("GET /api/v1/nodes/{name}/proxy/configz"))?;
    let configz: serde_json::Value = serde_json::from_str(&text).context("configz is not JSON")?;
    let live = configz
        .get("kubeletconfig")
        .with_context(|| format!("configz has no kubeletconfig: {text}"))?;

    let path = agent::paths::KUBELET_CONFIG;
    let file_text = node.vm.run(&in_machine(machine, &format!("cat {path}")))?;
    let file: serde_json::Value =
        serde_yaml_ng::from_str(&file_text).with_context(|| format!("{path} is not YAML:\n{file_text}"))?;

    for (source, config) in [("the live kubelet (configz)", live), (path, &file)] {
        let cluster_dns = &config["clusterDNS"];
        ensure!(
            *cluster_dns == serde_json::json!([CLUSTER_LISTENER.to_string()]),
            "{source} has clusterDNS {cluster_dns}, expected [\"{CLUSTER_LISTENER}\"]"
        );
        let resolv_conf = &config["resolvConf"];
        ensure!(
            resolv_conf.as_str() == Some(LOCALDNS_RESOLV_CONF),
            "{source} has resolvConf {resolv_conf}, expected {LOCALDNS_RESOLV_CONF:?}"
        );
        eprintln!("==> {source}: clusterDNS {cluster_dns}, resolvConf {resolv_conf}");
    }
    Ok(())
}

/// Spec §1 and §5: a `Default` pod's resolver is the LocalDNS resolv.conf, so a lab upstream
/// name resolves through the node listener; looked up twice, the upstream is asked once (over
/// TCP from the node's address: CoreDNS's `force_tcp` forward), the second answer coming from
/// CoreDNS's cache (capped at 30 s; both lookups run within it). Nothing else asks for the
/// name: it is new, only A is asked (`-type=a`) and the trailing dot skips the search list.
fn a_default_pod_resolves_a_lab_name_through_the_node_listener_asked_upstream_once(
    node: &JoinedNode,
    name: &str,
    host: &ResolvConf,
) -> anyhow::Result<()> {
    let lab_name = format!("dns-wiring-{}.upstream.test.", std::process::id());
    let lab_ip = Ipv4Addr::new(10, 77, 0, 9);
    node.lab.dns().set_a(&lab_name, &[lab_ip], TTL)?;
    let before = node.lab.dns().query_count(&lab_name)?;
    ensure!(
        before == 0,
        "{before} queries for {lab_name} before any pod asked for it"
    );

    let pod = lookup_pod(
        "dns-default",
        name,
        &node.artifacts.test_image_ref,
        DnsPolicy::Default,
        &[
            Step::resolv_conf("resolv.conf"),
            Step::nslookup("first", "a", &lab_name),
            Step::nslookup("second", "a", &lab_name),
        ],
    )?;
    let finished = run_lookup_pod(node, &pod)?;
    let steps = parse_framed(&finished)?;

    // Kubelet writes the pod's file in its own order (nameservers first), and the options in
    // any order (it merges them through a map): compare the options as a set.
    let resolv = step(&steps, "resolv.conf")?.ensure_success()?;
    let seen = ResolvConf::parse(resolv);
    let sorted = |mut options: Vec<String>| {
        options.sort();
        options
    };
    ensure!(
        seen.nameservers() == [NODE_LISTENER.to_string()]
            && seen.search() == host.search()
            && sorted(seen.options()) == sorted(host.options()),
        "the Default pod's resolver should be the LocalDNS resolv.conf's (nameserver {NODE_LISTENER}, \
         search {:?}, options {:?}), kubelet gave it:\n{resolv}",
        host.search(),
        host.options()
    );
    for label in ["first", "second"] {
        let lookup = step(&steps, label)?.ensure_success()?;
        let out = Nslookup::parse(lookup)?;
        ensure_server(
            &out,
            NODE_LISTENER,
            &format!("the Default pod's {label} lookup"),
            lookup,
        )?;
        let addresses = out.addresses_of(&lab_name);
        ensure!(
            addresses == [IpAddr::V4(lab_ip)],
            "the Default pod's {label} lookup got {addresses:?} for {lab_name}, expected [{lab_ip}]:\n{lookup}"
        );
    }
    eprintln!("==> Default pod: {lab_name} -> {lab_ip} through {NODE_LISTENER}, twice");

    let queries: Vec<_> = node
        .lab
        .dns()
        .queries()
        .into_iter()
        .filter(|q| q.name == lab_name)
        .collect();
    let count = node.lab.dns().query_count(&lab_name)?;
    ensure!(
        count == 1 && queries.len() == 1,
        "the lab's upstream saw {count} queries for {lab_name}, looked up twice by the pod; \
         expected 1 (the second from CoreDNS's cache): {queries:?}"
    );
    let q = &queries[0];
    ensure!(
        q.record_type == "A" && q.from.ip() == IpAddr::V4(node.deployed.node_ip) && q.protocol == "tcp",
        "the one upstream query for {lab_name} should be A over TCP from the node {} \
         (CoreDNS forwarding with force_tcp), it was {q:?}",
        node.deployed.node_ip
    );
    eprintln!("==> the upstream saw 1 query for {lab_name}: {q:?}");
    Ok(())
}

/// Restarts the machine as an operator would, `machinectl reboot <m>` (its init reboots, nspawn
/// exits 133 and `systemd-nspawn@<m>.service` starts it again), and waits until a new leader
/// runs with `localdns.service` active.
fn restart_the_machine(node: &JoinedNode, machine: &str) -> anyhow::Result<()> {
    let leader = |node: &JoinedNode| -> anyhow::Result<String> {
        let out = node
            .vm
            .run_unchecked(&format!("machinectl show {machine} -p Leader --value"))?;
        Ok(out.stdout_text().trim().to_string())
    };
    let before = leader(node)?;
    ensure!(
        !before.is_empty(),
        "machine {machine} has no leader before the restart"
    );
    let started = Instant::now();
    eprintln!("==> machinectl reboot {machine} (leader pid {before}) ...");
    node.vm.run(&format!("machinectl reboot {machine}"))?;
    let deadline = node.deadline(3);
    loop {
        let now = leader(node)?;
        let (code, active) = node.machine_systemctl(machine, "is-active localdns.service")?;
        if !now.is_empty() && now != before && code == Some(0) && active.trim() == "active" {
            eprintln!(
                "==> {machine} runs again (leader pid {now}) with localdns.service active after {:.1}s",
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if started.elapsed() > deadline {
            let status = node.vm.run_unchecked(&format!(
                "systemctl status --no-pager systemd-nspawn@{machine}.service"
            ))?;
            bail!(
                "after `machinectl reboot {machine}` no new leader with localdns.service active within \
                 {deadline:?}: leader {now:?} (was {before}), localdns.service {:?}\n{}",
                active.trim(),
                status.stdout_text()
            );
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// After the restart the machine's own lookups still go through the node listener: a new lab
/// name asked inside the machine reaches the upstream only over TCP from the node (CoreDNS),
/// never as the VM's own resolver would ask (UDP).
fn the_machine_resolves_a_lab_name_through_the_node_listener(
    node: &JoinedNode,
    machine: &str,
) -> anyhow::Result<()> {
    let lab_name = format!("dns-wiring-machine-{}.upstream.test.", std::process::id());
    let lab_ip = Ipv4Addr::new(10, 77, 0, 10);
    node.lab.dns().set_a(&lab_name, &[lab_ip], TTL)?;
    let out = node
        .vm
        .run(&in_machine(machine, &format!("getent ahostsv4 {lab_name}")))
        .with_context(|| format!("resolving {lab_name} inside machine {machine}"))?;
    ensure!(
        out.split_whitespace().next() == Some(lab_ip.to_string().as_str()),
        "inside {machine}, `getent ahostsv4 {lab_name}` should give {lab_ip}:\n{out}"
    );
    let queries: Vec<_> = node
        .lab
        .dns()
        .queries()
        .into_iter()
        .filter(|q| q.name == lab_name)
        .collect();
    ensure!(
        !queries.is_empty()
            && queries
                .iter()
                .all(|q| q.protocol == "tcp" && q.from.ip() == IpAddr::V4(node.deployed.node_ip)),
        "the machine's lookup of {lab_name} should reach the upstream only through CoreDNS (TCP from \
         the node {}), it saw: {queries:?}",
        node.deployed.node_ip
    );
    eprintln!("==> inside {machine}: {lab_name} -> {lab_ip}, upstream asked {queries:?}");
    Ok(())
}
