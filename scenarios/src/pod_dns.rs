//! What pods on a joined node resolve, through the API server: lookup pods run to completion
//! with their logs, and the `ClusterFirst` check shared by the scenarios (`resumed_node`'s checks
//! with LocalDNS, `bootstrap` without).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::Api;

use crate::cluster::run_pod;
use crate::dns::{DnsPolicy, NODE_LISTENER, Nslookup, ResolvConf, Step, lookup_pod, parse_framed, step};
use crate::node::JoinedNode;

/// A `ClusterFirst` pod on the node resolves the `kubernetes` Service through `server` only:
/// its resolv.conf names `server` and nothing else, busybox `nslookup` says `Server: <server>`,
/// and the answer is the Service's ClusterIP as the API server has it. With LocalDNS `server`
/// is the cluster listener (docs/design.md §1, its CoreDNS forwards to the cluster DNS); without, the
/// cluster DNS itself (`Cluster.ClusterDNS`).
pub fn a_cluster_first_pod_resolves_the_kubernetes_service_through(
    node: &JoinedNode,
    server: Ipv4Addr,
) -> anyhow::Result<()> {
    let name = &node.deployed.name;
    let kubernetes = "kubernetes.default.svc.cluster.local.";
    // The cluster DNS is the `kube-dns` ClusterIP behind the node's own kube-proxy, which a
    // repave's new machine or a recreated pod starts again: it must have synced first.
    harness::kind::node_proxy::wait_kube_proxy_synced(&node.vm, node.deadline(3))?;
    let service = node
        .block_on(Api::<Service>::namespaced(node.client.clone(), "default").get("kubernetes"))
        .context("reading Service default/kubernetes")?;
    let cluster_ip: IpAddr = service
        .spec
        .and_then(|s| s.cluster_ip)
        .context("Service default/kubernetes has no ClusterIP")?
        .parse()?;
    let pod = lookup_pod(
        "dns-cluster-first",
        name,
        &node.artifacts.test_image_ref,
        DnsPolicy::ClusterFirst,
        &[
            Step::resolv_conf("resolv.conf"),
            Step::nslookup("kubernetes", "a", kubernetes),
        ],
    )?;
    let finished = run_lookup_pod(node, &pod)?;
    let steps = parse_framed(&finished)?;

    let resolv = step(&steps, "resolv.conf")?.ensure_success()?;
    ensure!(
        ResolvConf::parse(resolv).nameservers() == [server.to_string()],
        "the ClusterFirst pod's resolver should be {server} only:\n{resolv}"
    );
    let lookup = step(&steps, "kubernetes")?.ensure_success()?;
    let out = Nslookup::parse(lookup)?;
    ensure_server(&out, server, "the ClusterFirst pod", lookup)?;
    let addresses = out.addresses_of(kubernetes);
    ensure!(
        addresses == [cluster_ip],
        "the ClusterFirst pod got {addresses:?} for {kubernetes}, expected the Service's ClusterIP \
         {cluster_ip}:\n{lookup}"
    );
    eprintln!("==> ClusterFirst pod: {kubernetes} -> {cluster_ip} through {server}");
    Ok(())
}

/// A `dnsPolicy: Default` pod on the node resolves the lab name `lab_name` (which the caller
/// gave the address `address`) through the node listener: busybox `nslookup` says
/// `Server: <node listener>` and the answer is `address`.
pub fn a_default_pod_resolves_through_the_node_listener(
    node: &JoinedNode,
    lab_name: &str,
    address: Ipv4Addr,
) -> anyhow::Result<()> {
    let pod = lookup_pod(
        "dns-default",
        &node.deployed.name,
        &node.artifacts.test_image_ref,
        DnsPolicy::Default,
        &[Step::nslookup("lookup", "a", lab_name)],
    )?;
    let finished = run_lookup_pod(node, &pod)?;
    let steps = parse_framed(&finished)?;
    let lookup = step(&steps, "lookup")?.ensure_success()?;
    let out = Nslookup::parse(lookup)?;
    ensure_server(&out, NODE_LISTENER, "the Default pod", lookup)?;
    let addresses = out.addresses_of(lab_name);
    ensure!(
        addresses == [IpAddr::V4(address)],
        "the Default pod got {addresses:?} for {lab_name}, expected {address}:\n{lookup}"
    );
    eprintln!("==> Default pod: {lab_name} -> {address} through {NODE_LISTENER}");
    Ok(())
}

/// `nslookup` asked `server` and complained about nothing (`who` names the asker in errors).
pub fn ensure_server(out: &Nslookup, server: Ipv4Addr, who: &str, text: &str) -> anyhow::Result<()> {
    ensure!(
        out.server == Some(IpAddr::V4(server)),
        "{who} asked {:?}, expected Server: {server}:\n{text}",
        out.server
    );
    ensure!(out.errors.is_empty(), "{who}'s nslookup complained:\n{text}");
    Ok(())
}

/// Runs `pod` in `default` to completion and returns its log.
pub fn run_lookup_pod(node: &JoinedNode, pod: &Pod) -> anyhow::Result<String> {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let started = Instant::now();
    let finished = node
        .block_on(run_pod(&node.client, "default", pod, node.deadline(3)))
        .with_context(|| format!("running pod {pod_name}"))?;
    eprintln!(
        "==> pod {pod_name} ran in {:.1}s; its log:\n{}",
        started.elapsed().as_secs_f64(),
        finished.log
    );
    Ok(finished.log)
}
