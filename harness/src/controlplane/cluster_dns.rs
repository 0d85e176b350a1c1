//! The cluster DNS: a Corefile for CoreDNS with its `kubernetes` plugin serving
//! `cluster.local`, and the `kube-dns` Service that names its address.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use serde_json::json;

use super::flags::COREDNS_READY;
use super::pki::CLUSTER_DOMAIN;

/// The Corefile: bound at `cluster_dns:53` only, answers `cluster.local` (and reverse
/// lookups of Services and pods) from the API server named in `kubeconfig`, forwards every
/// other name to the lab's upstream DNS server, logs every query.
pub fn corefile(cluster_dns: Ipv4Addr, upstream: SocketAddr, kubeconfig: &Path) -> String {
    format!(
        ".:53 {{\n\
         \x20   bind {cluster_dns}\n\
         \x20   errors\n\
         \x20   log\n\
         \x20   ready {COREDNS_READY}\n\
         \x20   kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n\
         \x20       kubeconfig {}\n\
         \x20       pods insecure\n\
         \x20       fallthrough in-addr.arpa ip6.arpa\n\
         \x20       ttl 30\n\
         \x20   }}\n\
         \x20   forward . {upstream}\n\
         \x20   cache 30\n\
         }}\n",
        kubeconfig.display()
    )
}

/// The `kube-dns` Service in `kube-system` with ClusterIP `cluster_dns` (as kubeadm names it;
/// no endpoints: CoreDNS runs in the lab namespace, bound at that address itself).
pub fn kube_dns_service(cluster_dns: Ipv4Addr) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": { "k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS" },
        },
        "spec": {
            "clusterIP": cluster_dns.to_string(),
            "selector": { "k8s-app": "kube-dns" },
            "ports": [
                { "name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53 },
                { "name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53 },
            ],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corefile_binds_the_cluster_dns_serves_cluster_local_and_forwards_to_the_lab() {
        let text = corefile(
            Ipv4Addr::new(10, 96, 0, 10),
            "192.168.103.1:53".parse().unwrap(),
            Path::new("/p/admin.conf"),
        );
        assert!(text.contains("bind 10.96.0.10\n"), "{text}");
        assert!(
            text.contains("kubernetes cluster.local in-addr.arpa ip6.arpa {"),
            "{text}"
        );
        assert!(text.contains("kubeconfig /p/admin.conf\n"), "{text}");
        assert!(text.contains("forward . 192.168.103.1:53\n"), "{text}");
        assert!(text.contains("ready 127.0.0.1:8181\n"), "{text}");
    }

    #[test]
    fn kube_dns_service_has_the_cluster_dns_address() {
        let svc = kube_dns_service(Ipv4Addr::new(10, 96, 0, 10));
        assert_eq!(svc["spec"]["clusterIP"], "10.96.0.10");
        assert_eq!(svc["metadata"]["namespace"], "kube-system");
        assert_eq!(svc["spec"]["ports"].as_array().unwrap().len(), 2);
    }
}
