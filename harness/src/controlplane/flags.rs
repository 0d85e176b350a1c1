//! The command lines of the control plane's processes (as checked by hand first, see
//! docs/lab.md): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, CoreDNS.

use std::net::Ipv4Addr;
use std::path::Path;

use super::pki::Pki;
use crate::lab::addr::API_SERVER_PORT;

/// etcd's client URL, inside the lab namespace only.
pub const ETCD_CLIENT_URL: &str = "http://127.0.0.1:2379";
/// etcd's peer URL (one member).
pub const ETCD_PEER_URL: &str = "http://127.0.0.1:2380";
/// etcd's metrics URL.
pub const ETCD_METRICS_URL: &str = "http://127.0.0.1:2381";
/// The Service CIDR (`--service-cluster-ip-range`).
pub const SERVICE_CIDR: &str = "10.96.0.0/12";
/// The cluster DNS Service's address (`Cluster.ClusterDNS`), on the namespace's `lo`.
pub const CLUSTER_DNS_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
/// CoreDNS's `ready` plugin (`GET /ready` answers 200 once the `kubernetes` plugin synced).
pub const COREDNS_READY: &str = "127.0.0.1:8181";

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// One etcd member with its data in `data_dir`, listening on 127.0.0.1 only.
pub fn etcd(data_dir: &Path) -> Vec<String> {
    vec![
        "--name=lab".into(),
        format!("--data-dir={}", path(data_dir)),
        format!("--listen-client-urls={ETCD_CLIENT_URL}"),
        format!("--advertise-client-urls={ETCD_CLIENT_URL}"),
        format!("--listen-peer-urls={ETCD_PEER_URL}"),
        format!("--initial-advertise-peer-urls={ETCD_PEER_URL}"),
        format!("--initial-cluster=lab={ETCD_PEER_URL}"),
        "--initial-cluster-state=new".into(),
        format!("--listen-metrics-urls={ETCD_METRICS_URL}"),
    ]
}

/// kube-apiserver on `:6443` (every address of the namespace), advertising the bridge address.
pub fn kube_apiserver(pki: &Pki, advertise: Ipv4Addr) -> Vec<String> {
    let f = |name: &str| path(&pki.file(name));
    vec![
        format!("--advertise-address={advertise}"),
        format!("--secure-port={API_SERVER_PORT}"),
        format!("--etcd-servers={ETCD_CLIENT_URL}"),
        format!("--client-ca-file={}", f("ca.crt")),
        format!("--tls-cert-file={}", f("apiserver.crt")),
        format!("--tls-private-key-file={}", f("apiserver.key")),
        format!(
            "--kubelet-client-certificate={}",
            f("apiserver-kubelet-client.crt")
        ),
        format!("--kubelet-client-key={}", f("apiserver-kubelet-client.key")),
        "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname".into(),
        "--enable-bootstrap-token-auth=true".into(),
        "--authorization-mode=Node,RBAC".into(),
        "--enable-admission-plugins=NodeRestriction".into(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", f("sa.pub")),
        format!("--service-account-signing-key-file={}", f("sa.key")),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        format!("--proxy-client-cert-file={}", f("front-proxy-client.crt")),
        format!("--proxy-client-key-file={}", f("front-proxy-client.key")),
        format!("--requestheader-client-ca-file={}", f("front-proxy-ca.crt")),
        "--requestheader-allowed-names=front-proxy-client".into(),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
        "--requestheader-group-headers=X-Remote-Group".into(),
        "--requestheader-username-headers=X-Remote-User".into(),
        "--allow-privileged=true".into(),
    ]
}

/// kube-controller-manager: every default controller plus `bootstrapsigner` and
/// `tokencleaner`; CSR signing with the cluster CA (the default approver approves node
/// client CSRs given the bootstrap RBAC). Node IPAM is off (`--allocate-node-cidrs=false`):
/// each kubelet gets its pod CIDR `10.244.<k>.0/24` from the agent config.
pub fn kube_controller_manager(pki: &Pki) -> Vec<String> {
    let f = |name: &str| path(&pki.file(name));
    let kubeconfig = f("controller-manager.conf");
    vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1".into(),
        format!("--client-ca-file={}", f("ca.crt")),
        format!("--requestheader-client-ca-file={}", f("front-proxy-ca.crt")),
        "--cluster-name=lab".into(),
        format!("--cluster-signing-cert-file={}", f("ca.crt")),
        format!("--cluster-signing-key-file={}", f("ca.key")),
        "--controllers=*,bootstrapsigner,tokencleaner".into(),
        "--leader-elect=true".into(),
        format!("--root-ca-file={}", f("ca.crt")),
        format!("--service-account-private-key-file={}", f("sa.key")),
        "--use-service-account-credentials=true".into(),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--allocate-node-cidrs=false".into(),
    ]
}

/// kube-scheduler.
pub fn kube_scheduler(pki: &Pki) -> Vec<String> {
    let kubeconfig = path(&pki.scheduler_kubeconfig());
    vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1".into(),
        "--leader-elect=true".into(),
    ]
}

/// CoreDNS serving the cluster DNS from `corefile`.
pub fn coredns(corefile: &Path) -> Vec<String> {
    vec!["-conf".into(), path(corefile)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pki() -> Pki {
        Pki {
            dir: "/p".into(),
            server_url: "https://192.168.103.1:6443".into(),
            bootstrap_token: super::super::bootstrap::BootstrapToken::parse("abcdef.0123456789abcdef")
                .unwrap(),
        }
    }

    #[test]
    fn apiserver_uses_the_lab_address_the_pki_and_local_etcd() {
        let args = kube_apiserver(&pki(), Ipv4Addr::new(192, 168, 103, 1));
        for want in [
            "--advertise-address=192.168.103.1",
            "--secure-port=6443",
            "--etcd-servers=http://127.0.0.1:2379",
            "--client-ca-file=/p/ca.crt",
            "--enable-bootstrap-token-auth=true",
            "--service-cluster-ip-range=10.96.0.0/12",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} missing from {args:?}");
        }
    }

    #[test]
    fn controller_manager_signs_csrs_runs_the_bootstrap_controllers_and_leaves_ipam_off() {
        let args = kube_controller_manager(&pki());
        for want in [
            "--cluster-signing-cert-file=/p/ca.crt",
            "--cluster-signing-key-file=/p/ca.key",
            "--controllers=*,bootstrapsigner,tokencleaner",
            "--allocate-node-cidrs=false",
            "--kubeconfig=/p/controller-manager.conf",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} missing from {args:?}");
        }
    }

    #[test]
    fn etcd_listens_on_loopback_only() {
        let args = etcd(Path::new("/d"));
        assert!(args.contains(&"--data-dir=/d".to_string()));
        assert!(
            args.iter()
                .filter(|a| a.contains("://"))
                .all(|a| a.contains("127.0.0.1")),
            "{args:?}"
        );
    }
}
