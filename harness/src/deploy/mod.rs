//! Deploying the agent onto a lab VM: the node config becomes an agent config with the lab's
//! values (validated by the agent's own validator), the agent binary cargo built goes to
//! `<HostPrefix>/bin/unbounded-agent`, the config to `/etc/unbounded/agent/config.json`, and
//! `unbounded-agent start` runs under a deadline scaled for the accelerator.
//!
//! * [`machine`]: the node's Machine and its daemon's access in the lab's cluster, before `start`;
//! * [`plan`]: the pure part (config, paths, command line, deadline), unit tested;
//! * [`agent_binary`]: the agent binary to copy, refused when missing or older than its sources;
//! * [`start`]: the executor on a [`Vm`];
//! * [`ready`]: the Node becoming Ready; [`join`]: artifacts + deploy + Ready in one call;
//! * [`offline`]: offline node configs (bundle handed to the VM, no route to the artifact server);
//! * [`measure`]: time to LocalDNS ready and Node Ready, memory at steady state;
//! * [`evidence`]: what is kept when it fails (start's output, journals of host and machine,
//!   kubelet's journal, `machinectl status`), under `$LAB_ARTIFACTS_DIR/<test>/<vm>/`.

pub mod agent_binary;
pub mod error;
pub mod evidence;
pub mod join;
pub mod lab_values;
pub mod machine;
pub mod measure;
pub mod offline;
pub mod plan;
pub mod ready;
pub mod start;

use std::net::Ipv4Addr;
use std::time::Duration;

use agent::config::RawConfig;

pub use error::DeployError;
pub use lab_values::lab_values;
pub use plan::DeployPlan;

use crate::artifacts::LabArtifacts;
use crate::lab::Lab;
use crate::node_config::{LabValues, NodeConfig};
use crate::vm::Vm;

/// A node whose `start` finished (kubelet active; the Node's readiness is the caller's check).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DeployedNode {
    /// The Kubernetes node name.
    pub name: String,
    pub node_ip: Ipv4Addr,
    pub pod_cidr: String,
    /// The agent binary in the VM.
    pub guest_agent: String,
    /// The agent config deployed (validated).
    pub config: RawConfig,
    /// The guest's uptime (seconds, `/proc/uptime`) when `start` began: the origin of the
    /// guest's monotonic timestamps (e.g. a unit's `ActiveEnterTimestampMonotonic`).
    pub start_uptime: f64,
    /// How long `start` ran, seen from the host.
    pub start_took: Duration,
    pub stdout: String,
    pub stderr: String,
}

/// Deploys `node` onto `vm`, a VM of `lab` (whose control plane must run), with the values of
/// the lab's cluster, the published `artifacts` and the VM's lab address and pod CIDR
/// (`10.244.<k>.0/24` for VM `k`), after giving the node its Machine and, unless the node
/// config leaves the daemon out, its daemon's access and token ([`machine`]). Evidence of a failure goes under
/// `$LAB_ARTIFACTS_DIR/<running test>/<vm>/`.
pub fn deploy_node(
    lab: &Lab,
    vm: &Vm,
    node: &NodeConfig,
    artifacts: &LabArtifacts,
) -> Result<DeployedNode, DeployError> {
    deploy_node_as(
        lab,
        vm,
        node,
        artifacts,
        &crate::vm::evidence::current_test_name(),
    )
}

/// [`deploy_node`] with evidence under `$LAB_ARTIFACTS_DIR/<test>/<vm>/`.
pub fn deploy_node_as(
    lab: &Lab,
    vm: &Vm,
    node: &NodeConfig,
    artifacts: &LabArtifacts,
    test: &str,
) -> Result<DeployedNode, DeployError> {
    let cluster = lab
        .cluster()
        .ok_or_else(|| DeployError::NoControlPlane { lab: lab.name() })?;
    let nic = lab_values::nic_of(lab, vm)?;
    let mut values = lab_values(cluster, artifacts, vm, &nic);
    values.daemon_token = machine::give_the_node_its_machine(cluster, node.name(), node.daemon)?;
    deploy_with_values(vm, node, &values, test)
}

/// Deploys `node` onto `vm` with the lab's `values` (see the module docs), with the agent built
/// by cargo (`$CARGO_TARGET_DIR/debug/unbounded-agent`). Evidence of a failure goes under
/// `$LAB_ARTIFACTS_DIR/<test>/<vm>/`.
pub fn deploy_with_values(
    vm: &Vm,
    node: &NodeConfig,
    values: &LabValues,
    test: &str,
) -> Result<DeployedNode, DeployError> {
    let plan = DeployPlan::new(node, values)?;
    let agent = plan::host_agent_binary(&plan::target_dir());
    start::deploy_plan(vm, plan, &agent, test)
}
