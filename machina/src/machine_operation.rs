//! `MachineOperation`: one action on a machine (a node reboot, an agent reset, ...), picked up by the
//! agent or a controller; the agent runs one at a time (cluster-scoped).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One operation on one machine (`machineRef`) or on each machine a selector matches.
// Each `printcolumn(...)` repeats `type_ = ...`, which clippy takes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "unbounded-cloud.io",
    version = "v1alpha3",
    kind = "MachineOperation",
    status = "MachineOperationStatus",
    shortname = "mop",
    derive = "PartialEq",
    doc = "An operation to perform on a Machine, such as a node reboot or an agent reset.",
    printcolumn(name = "Machine", type_ = "string", json_path = ".spec.machineRef"),
    printcolumn(name = "Operation", type_ = "string", json_path = ".spec.operationKind"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MachineOperationSpec {
    /// The Machine this operation targets (this or `machineSelector`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_ref: Option<String>,
    /// Machines by label; the controller creates one operation per match (this or `machineRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_selector: Option<LabelSelector>,
    /// What to do.
    pub operation_kind: OperationKind,
    /// Key-value arguments for the executor.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
    /// Delete the operation this many seconds after it finished; kept forever when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// The operations. The agent handles the node and agent ones; controllers the host ones.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum OperationKind {
    /// Restart the nspawn machine on the same rootfs (goal state re-resolved).
    NodeReboot,
    /// Remove the node and everything the agent installed from the host.
    AgentReset,
    /// Replace the host's agent binary.
    AgentUpgrade,
    /// Power-cycle the host out of band.
    HostReboot,
    /// Power the host off out of band.
    HostPowerOff,
    /// Power the host on out of band.
    HostPowerOn,
    /// Reinstall the host and the agent.
    HostReimage,
}

/// The phases of an operation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum OperationPhase {
    Pending,
    InProgress,
    Complete,
    Failed,
}

/// The observed state of an operation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineOperationStatus {
    /// Where the operation is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<OperationPhase>,
    /// The current state, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A CamelCase word saying why the operation is in its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The latest observations of the operation's state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When the executor began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the operation reached `Complete` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// The Machine's `metadata.generation` when the executor began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_machine_generation: Option<i64>,
}

impl MachineOperationStatus {
    /// Whether the operation has finished, successfully or not.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.phase,
            Some(OperationPhase::Complete | OperationPhase::Failed)
        )
    }
}
