//! The Kind cluster's own parts on a joined VM: its kube-proxy DaemonSet pod running in the
//! node's machine with its nftables table on the host beside LocalDNS's NOTRACK table, and the
//! cluster's CoreDNS pods logging the VM as the client of what the node's LocalDNS forwarded to
//! the `kube-dns` ClusterIP (docs/lab.md, "The Kind cluster").

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};

use crate::cluster::describe_pod;
use crate::host_state::{NFT_FAMILY, NFT_TABLE, read_nft_table};
use crate::node::JoinedNode;

/// The cluster DNS Service's ClusterIP, which kube-proxy's table must name.
pub const KUBE_DNS_CLUSTER_IP: &str = "10.96.0.10";
const POLL: Duration = Duration::from_secs(3);

/// Waits until the kube-proxy pod of the node's Node is Running with its container ready;
/// returns it. Fails with the pod's state when it does not get there within `timeout`.
pub fn wait_kube_proxy_running(node: &JoinedNode, timeout: Duration) -> anyhow::Result<Pod> {
    let _waiting = harness::phase_clock::enter(harness::phase_clock::Phase::Waiting);
    let pods: Api<Pod> = Api::namespaced(node.client.clone(), "kube-system");
    let params = ListParams::default()
        .labels("k8s-app=kube-proxy")
        .fields(&format!("spec.nodeName={}", node.deployed.name));
    let started = Instant::now();
    node.block_on(async {
        let mut last = String::from("no kube-proxy pod is bound to the node");
        loop {
            match pods.list(&params).await {
                Ok(list) => match list.items.first() {
                    Some(pod) if is_running_and_ready(pod) => return Ok(pod.clone()),
                    Some(pod) => last = describe_pod(pod),
                    None => {}
                },
                Err(e) => last = format!("listing kube-system pods: {e}"),
            }
            if started.elapsed() >= timeout {
                bail!(
                    "the kube-proxy pod of node {} is not Running and ready after {:?}: {last}",
                    node.deployed.name,
                    started.elapsed()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    })
}

/// Deletes the node's kube-proxy pod and waits until its DaemonSet's next one is Running and
/// ready and has synced (healthz 200): a kube-proxy started over the table its predecessor left
/// on the host, as after every restart of the node's machine. Returns the new pod's name.
pub fn restart_kube_proxy(node: &JoinedNode, timeout: Duration) -> anyhow::Result<String> {
    let old = wait_kube_proxy_running(node, timeout)?;
    let old_uid = old.metadata.uid.clone().unwrap_or_default();
    let old_name = old.metadata.name.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(node.client.clone(), "kube-system");
    node.block_on(pods.delete(&old_name, &Default::default()))
        .with_context(|| format!("deleting kube-proxy pod {old_name}"))?;
    let started = Instant::now();
    let new = loop {
        let pod = wait_kube_proxy_running(node, timeout)?;
        if pod.metadata.uid.as_deref() != Some(old_uid.as_str()) {
            break pod;
        }
        ensure!(
            started.elapsed() < timeout,
            "kube-proxy pod {old_name} was not replaced within {timeout:?}"
        );
        std::thread::sleep(POLL);
    };
    harness::kind::node_proxy::wait_kube_proxy_synced(&node.vm, timeout)?;
    Ok(new.metadata.name.unwrap_or_default())
}

fn is_running_and_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|c| !c.is_empty() && c.iter().all(|c| c.ready))
}

/// kube-proxy's `ip kube-proxy` table on the VM names the `kube-dns` ClusterIP (waiting up to
/// `timeout` for its first sync: a pod resumed from a checkpoint may not have written it yet),
/// and LocalDNS's NOTRACK table is there beside it.
pub fn kube_proxys_table_sits_beside_localdns(node: &JoinedNode, timeout: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let tables = crate::host_state::read_nft_tables(&node.vm)?;
        ensure!(
            tables.contains(&format!("{NFT_FAMILY} {NFT_TABLE}")),
            "LocalDNS's table {NFT_FAMILY} {NFT_TABLE} is missing; the VM has {tables:?}"
        );
        let last = match read_nft_table(&node.vm, "ip", "kube-proxy")? {
            Some(table) if names_kube_dns(&table) => return Ok(()),
            Some(table) => format!("kube-proxy's table never names {KUBE_DNS_CLUSTER_IP}: {table:#?}"),
            None => format!("the VM has no nft table ip kube-proxy (kube-proxy's); it has {tables:?}"),
        };
        if started.elapsed() >= timeout {
            bail!("after {:?}: {last}", started.elapsed());
        }
        std::thread::sleep(POLL);
    }
}

fn names_kube_dns(table: &crate::host_state::NftTable) -> bool {
    table
        .rules
        .iter()
        .chain(table.other.iter())
        .any(|r| r.contains(KUBE_DNS_CLUSTER_IP))
}

/// A request from the VM's host to the `kubernetes` Service's ClusterIP reaches the API server
/// (kube-proxy's DNAT on the VM to the address the API server advertises), and a DNS query over
/// TCP to the `kube-dns` ClusterIP is answered (DNAT to a CoreDNS pod of the Kind node).
pub fn the_host_reaches_the_api_server_through_its_clusterip(node: &JoinedNode) -> anyhow::Result<()> {
    let dig = format!(
        "dig +tcp +time=5 +tries=2 +short @{KUBE_DNS_CLUSTER_IP} kubernetes.default.svc.cluster.local 2>&1 || true"
    );
    let answer = node
        .vm
        .run(&dig)
        .context("dig to the kube-dns ClusterIP from the VM")?;
    ensure!(
        answer.trim() == "10.96.0.1",
        "{KUBE_DNS_CLUSTER_IP}:53 over TCP from the VM answered {:?}, not 10.96.0.1; kube-proxy's \
         service-ips map on the VM:\n{}",
        answer.trim(),
        node.vm
            .run("nft list map ip kube-proxy service-ips 2>&1 || true")
            .unwrap_or_else(|e| e.to_string())
    );
    let out = node
        .vm
        .run("curl -sk --max-time 20 https://10.96.0.1:443/readyz")
        .context("curl to the kubernetes Service's ClusterIP from the VM")?;
    ensure!(
        out.trim() == "ok",
        "https://10.96.0.1/readyz from the VM answered {out:?}, not ok"
    );
    Ok(())
}

/// The lines of the cluster's CoreDNS pods' logs (`k8s-app=kube-dns`) that record a query for
/// `name` from `client` (CoreDNS's `log` plugin: `[INFO] <client>:<port> - <id> "A IN <name>. ...`).
pub fn coredns_queries_from(node: &JoinedNode, client: &str, name: &str) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(node.client.clone(), "kube-system");
    let params = ListParams::default().labels("k8s-app=kube-dns");
    let (needle_client, needle_name) = (format!("] {client}:"), format!(" IN {name}. "));
    node.block_on(async {
        let list = pods.list(&params).await.context("listing the CoreDNS pods")?;
        ensure!(
            !list.items.is_empty(),
            "the cluster has no CoreDNS pod (k8s-app=kube-dns)"
        );
        let mut lines = Vec::new();
        for pod in &list.items {
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let log = pods
                .logs(&pod_name, &LogParams::default())
                .await
                .with_context(|| format!("the logs of CoreDNS pod {pod_name}"))?;
            lines.extend(
                log.lines()
                    .filter(|l| l.contains(&needle_client) && l.contains(&needle_name))
                    .map(str::to_string),
            );
        }
        Ok(lines)
    })
}
