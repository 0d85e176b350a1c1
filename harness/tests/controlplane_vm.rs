//! A lab VM, before any agent runs on it, reaches the lab's Kind cluster the way a node will: the
//! API server at the Kind node's bridge address (its certificate names it) and the cluster DNS,
//! the `kube-dns` ClusterIP 10.96.0.10, through its default gateway, the bridge. Needs root,
//! Podman or Docker, and the cached images (`harness images build`).

use std::time::Instant;

use harness::lab::{Lab, LabSpec};

mod vm_support;
use vm_support::image;

#[test]
fn lab_vm_reaches_the_api_server_and_the_cluster_dns_through_the_bridge() {
    let test = "lab_vm_reaches_the_api_server_and_the_cluster_dns_through_the_bridge";
    let image = image();
    let lab = Lab::start(LabSpec {
        control_plane: true,
        ..LabSpec::for_test(test)
    })
    .unwrap_or_else(|e| panic!("starting a lab with its Kind cluster: {e}"));
    let cluster = lab.cluster().expect("a cluster").clone();
    let started = Instant::now();
    let vm = lab
        .add_vm("cpvm", image)
        .unwrap_or_else(|e| panic!("booting the VM: {e}"));
    eprintln!("VM up in {:.1?}", started.elapsed());

    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), &cluster.ca_cert_pem).unwrap();
    vm.copy_in(ca.path(), "/root/lab-ca.crt").unwrap();
    let readyz = vm
        .run(&format!(
            "curl -sS --max-time 20 --cacert /root/lab-ca.crt {}/readyz",
            cluster.api_server
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(readyz.trim(), "ok", "the API server from the VM");

    let dig = |name: &str| {
        vm.run(&format!(
            "dig @{} {name} A +short +tries=2 +time=5",
            cluster.cluster_dns
        ))
        .unwrap_or_else(|e| panic!("{e}"))
        .trim()
        .to_string()
    };
    assert_eq!(dig("kubernetes.default.svc.cluster.local"), "10.96.0.1");
    assert_eq!(dig("kube-dns.kube-system.svc.cluster.local"), "10.96.0.10");
    vm.shutdown().unwrap_or_else(|e| panic!("{e}"));
    lab.shutdown().unwrap_or_else(|e| panic!("{e}"));
}
