//! `Machine`: one host the agent runs a Kubernetes node on (cluster-scoped).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::agent_spec::AgentSpec;

/// The desired state of a host: its Kubernetes node, the agent's settings and its configuration.
// Each `printcolumn(...)` repeats `type_ = ...`, which clippy takes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "unbounded-cloud.io",
    version = "v1alpha3",
    kind = "Machine",
    status = "MachineStatus",
    shortname = "mach",
    derive = "PartialEq",
    doc = "A host that the unbounded agent runs a Kubernetes node on.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.kubernetes.nodeRef.name"),
    printcolumn(
        name = "K8s Version",
        type_ = "string",
        json_path = ".spec.kubernetes.version"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// The Kubernetes node this machine runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesSpec>,
    /// Settings for the unbounded node agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSpec>,
    /// The MachineConfiguration (and optionally its version) this machine follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration_ref: Option<MachineConfigurationRef>,
}

/// Kubernetes settings of a machine's node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesSpec {
    /// The Kubernetes version to install (e.g. `v1.35.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The Node that corresponds to this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<LocalObjectReference>,
    /// Labels passed to the kubelet's `--node-labels`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// Taints the node registers with, each `key[=value]:Effect`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub register_with_taints: Vec<String>,
    /// A bootstrap token Secret in `kube-system` (type `bootstrap.kubernetes.io/token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_token_ref: Option<LocalObjectReference>,
}

/// A reference to an object by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct LocalObjectReference {
    /// The referenced object's name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// A MachineConfiguration and optionally one of its versions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MachineConfigurationRef {
    /// The MachineConfiguration's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The MachineConfigurationVersion number; the controller fills in the latest deployed one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i32>,
}

/// The observed state of a machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Where the machine is in its life, for people; it follows the state machine, never drives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachinePhase>,
    /// More about the current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The MachineConfigurationVersion applied at the last provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<AppliedConfiguration>,
    /// The latest observations of the machine's state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The configuration version a machine was provisioned with.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedConfiguration {
    /// The MachineConfiguration's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The version number applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i32>,
    /// The MachineConfigurationVersion object's name (`<cfg>-v<N>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_name: Option<String>,
}

/// The phases of a machine.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MachinePhase {
    Pending,
    Rebooting,
    Provisioning,
    Joining,
    Ready,
    Failed,
}
