//! A lab VM joins a **Kind cluster** (docs/lab.md, "The Kind cluster"): the lab's cluster is made
//! by Kind's CLI from the lab's node image, the VM's agent joins it with the lab's bootstrap token
//! at the Kind node's lab address, the Node becomes Ready, and a `ClusterFirst` pod on it resolves
//! the `kubernetes` Service through LocalDNS's cluster listener, whose CoreDNS forwards to the
//! `kube-dns` ClusterIP: no CoreDNS of the lab answers there, only the cluster's own CoreDNS pods
//! behind kube-proxy's rules. The Kind cluster's kube-proxy DaemonSet pod runs on the VM's node
//! (its image from the node's `ContainerImages`), its `ip kube-proxy` table on the host beside
//! LocalDNS's NOTRACK table, and the host reaches the API server through the `kubernetes`
//! ClusterIP and the `kube-dns` one, also after its kube-proxy pod is replaced by one that starts
//! over the table the first left (as after every restart of the node's machine); it is the VM's
//! kube-proxy that sends LocalDNS's forwarded queries to
//! the CoreDNS pods, whose query log shows the VM's own address as the client (kube-proxy in the
//! Kind node would show the node's). The lab's upstream names resolve the same way (the
//! cluster's CoreDNS forwards them to the lab's DNS). After the lab is down, `kind get clusters`
//! no longer lists it. Like every lab node, the node has its Machine and runs the agent daemon,
//! which marks the Machine `Ready` and in sync.
//!
//! The node of `node-configs/localdns.json` resumed from its checkpoint on Kind (the Kind node
//! restored beside the VM, `harness::kind::saved`); the first run joins it for real and saves it.

use std::time::Duration;

use anyhow::{Context, ensure};
use harness::cache::Cache;
use harness::images::kind_tool;
use harness::kind::{Engine, cluster};
use scenarios::dns::{CLUSTER_LISTENER, DnsPolicy, Nslookup, Step, lookup_pod, parse_framed, step};
use scenarios::kube_proxy::{
    coredns_queries_from, kube_proxys_table_sits_beside_localdns, restart_kube_proxy,
    the_host_reaches_the_api_server_through_its_clusterip, wait_kube_proxy_running,
};
use scenarios::machine::the_nodes_daemon_keeps_its_machine_in_sync;
use scenarios::node::JoinedNode;
use scenarios::pod_dns::{a_cluster_first_pod_resolves_the_kubernetes_service_through, run_lookup_pod};

/// A lab upstream name the cluster's CoreDNS must forward to the lab's DNS.
const UPSTREAM_NAME: &str = "kind-upstream.lab.test";

#[test]
fn a_vm_joins_the_kind_cluster_and_its_cluster_first_pods_resolve_through_the_kube_dns_clusterip()
-> anyhow::Result<()> {
    let node = JoinedNode::resume_or_join_with(
        &scenarios::node_config("localdns.json"),
        scenarios::resume::prepare_host,
    )?;
    let lab_name = node.lab.name();
    let cache = Cache::open()?;
    let tool = kind_tool::require(&cache)?;
    let engine = Engine::detect(&harness::vm::evidence::test_dir(&scenarios::test_name()))?;
    node.run(|node| {
        let listed = cluster::list(&engine, &tool)?;
        ensure!(listed.contains(&lab_name), "kind get clusters: {listed:?}");
        the_nodes_daemon_keeps_its_machine_in_sync(node, node.deadline(2))?;
        let kube_proxy = wait_kube_proxy_running(node, node.deadline(3))?;
        eprintln!(
            "==> kube-proxy pod {} runs on the node",
            kube_proxy.metadata.name.as_deref().unwrap_or("?")
        );
        kube_proxys_table_sits_beside_localdns(node, node.deadline(2))?;
        the_host_reaches_the_api_server_through_its_clusterip(node)?;
        // A kube-proxy started over its predecessor's table (every machine restart does that)
        // keeps the ClusterIPs working: its nft must name protocols as kube-proxy writes them.
        let restarted = restart_kube_proxy(node, node.deadline(3))?;
        eprintln!("==> kube-proxy pod {restarted} started over its predecessor's table");
        the_host_reaches_the_api_server_through_its_clusterip(node)?;
        a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)?;
        let upstream = node.lab.addrs().bridge_ip();
        node.lab.dns().set_a(UPSTREAM_NAME, &[upstream], 300)?;
        let pod = lookup_pod(
            "dns-kind-upstream",
            &node.deployed.name,
            &node.artifacts.test_image_ref,
            DnsPolicy::ClusterFirst,
            &[Step::nslookup("upstream", "A", UPSTREAM_NAME)],
        )?;
        let log = run_lookup_pod(node, &pod)?;
        let steps = parse_framed(&log)?;
        let out = Nslookup::parse(step(&steps, "upstream")?.ensure_success()?)?;
        let addresses = out.addresses_of(UPSTREAM_NAME);
        ensure!(
            addresses == [std::net::IpAddr::V4(upstream)],
            "a ClusterFirst pod resolved {UPSTREAM_NAME} to {addresses:?}, not {upstream} (the \
             cluster's CoreDNS forwards to the lab's DNS): {out:?}"
        );
        ensure!(
            node.lab.dns().query_count(UPSTREAM_NAME)? >= 1,
            "the lab's upstream DNS saw no query for {UPSTREAM_NAME}"
        );
        let vm_ip = node.nic()?.ip.to_string();
        let logged = coredns_queries_from(node, &vm_ip, UPSTREAM_NAME)?;
        ensure!(
            !logged.is_empty(),
            "the cluster's CoreDNS logged no query for {UPSTREAM_NAME} from the VM's {vm_ip} (the VM's \
             kube-proxy sends LocalDNS's forwarded queries to the CoreDNS pods without hiding the VM)"
        );
        eprintln!(
            "==> the cluster's CoreDNS logged the VM as the client: {}",
            logged[0]
        );
        Ok(())
    })?;
    // `run` shut the lab down, which deletes its Kind cluster.
    let listed = harness::wait::wait_until::<_, harness::wait::WaitTimeout>(
        &lab_name,
        Duration::from_secs(60),
        "the Kind cluster gone",
        || match cluster::list(&engine, &tool) {
            Ok(listed) if !listed.contains(&lab_name) => harness::wait::Attempt::Ready(listed),
            Ok(listed) => harness::wait::retry(format!("listed: {listed:?}")),
            Err(e) => harness::wait::retry(e),
        },
    )
    .context("after the lab went down")?;
    eprintln!("==> kind get clusters after the lab went down: {listed:?}");
    Ok(())
}
