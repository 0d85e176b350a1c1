//! [`LabValues`] of a running lab for one of its VMs: the cluster's (API server, CA, token,
//! cluster DNS, version), the published artifacts', and the VM's own (address, pod CIDR, where
//! the offline bundle is inside it).

use crate::artifacts::LabArtifacts;
use crate::controlplane::ClusterAccess;
use crate::lab::{Lab, VmNic};
use crate::node_config::LabValues;
use crate::vm::{Net, Vm};

use super::error::DeployError;
use crate::addresses::pod_cidr;

/// The values for `vm` on `nic`. `offline_source` (used only by offline node configs) is where
/// the VM has the offline bundle: its share when it shares the bundle, else the copy
/// [`super::offline::hand_over`] makes.
pub fn lab_values(cluster: &ClusterAccess, artifacts: &LabArtifacts, vm: &Vm, nic: &VmNic) -> LabValues {
    LabValues {
        api_server: cluster.api_server.clone(),
        ca_cert_pem: cluster.ca_cert_pem.clone(),
        bootstrap_token: cluster.bootstrap_token.clone(),
        node_ip: nic.ip,
        pod_cidr: pod_cidr(nic.index),
        cluster_dns: cluster.cluster_dns,
        kubernetes_version: cluster.kubernetes_version.clone(),
        downloads: artifacts.downloads.clone(),
        machine_image: Some(artifacts.machine_image.clone()),
        container_images: artifacts.container_images.clone(),
        offline_source: Some(super::offline::guest_bundle(vm, artifacts).to_string()),
        daemon_token: None,
    }
}

/// The lab NIC `vm` is attached to (matched by its tap).
pub fn nic_of(lab: &Lab, vm: &Vm) -> Result<VmNic, DeployError> {
    let tap = match &vm.spec().net {
        Net::Tap { ifname, .. } => ifname.clone(),
        Net::User => "(none: user-mode networking)".into(),
    };
    lab.nics()
        .into_iter()
        .find(|nic| nic.tap == tap)
        .ok_or_else(|| DeployError::NotInLab {
            lab: lab.name(),
            vm: vm.name().to_string(),
            tap,
        })
}
