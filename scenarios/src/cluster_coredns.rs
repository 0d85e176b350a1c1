//! The Kind cluster's own CoreDNS pods as seen from a scenario: the queries their `log` plugin
//! recorded (docs/lab.md, "The Kind cluster").

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};

use crate::node::JoinedNode;

/// The lines of the cluster's CoreDNS pods' logs (`k8s-app=kube-dns`) that record a query for
/// `name` (CoreDNS's `log` plugin: `[INFO] <client>:<port> - <id> "A IN <name>. ...`).
pub fn coredns_queries_for(node: &JoinedNode, name: &str) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(node.client.clone(), "kube-system");
    let params = ListParams::default().labels("k8s-app=kube-dns");
    let needle = format!(" IN {name}. ");
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
            lines.extend(log.lines().filter(|l| l.contains(&needle)).map(str::to_string));
        }
        Ok(lines)
    })
}
