//! `MachineConfiguration`: a configuration profile for a class of machines (cluster-scoped). Edits to
//! its template become `MachineConfigurationVersion`s, as Deployment edits become ReplicaSets.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::agent_spec::AgentSpec;

/// The desired configuration profile for a class of machines.
// Each `printcolumn(...)` repeats `type_ = ...`, which clippy takes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "unbounded-cloud.io",
    version = "v1alpha3",
    kind = "MachineConfiguration",
    status = "MachineConfigurationStatus",
    shortname = "mc",
    derive = "PartialEq",
    doc = "A configuration profile for a class of machines; its versions are MachineConfigurationVersions.",
    printcolumn(
        name = "Latest Version",
        type_ = "integer",
        json_path = ".status.latestVersion"
    ),
    printcolumn(
        name = "Update Strategy",
        type_ = "string",
        json_path = ".spec.updateStrategy.type"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigurationSpec {
    /// The fields that are versioned into MachineConfigurationVersions.
    pub template: MachineConfigurationTemplate,
    /// Machines that receive this configuration automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_selector: Option<LabelSelector>,
    /// Among configurations matching one machine the highest priority wins (ties: by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// How changes reach the machines that use this configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    /// How many old versions to keep for rollback (versions in use are always kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub revision_history_limit: Option<i32>,
}

/// The versioned part of a configuration, copied into each MachineConfigurationVersion.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigurationTemplate {
    /// Kubernetes settings: version, node labels, taints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<MachineConfigurationKubernetes>,
    /// Settings for the unbounded node agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSpec>,
}

/// The Kubernetes settings of a configuration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigurationKubernetes {
    /// The Kubernetes version to install (e.g. `v1.35.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Labels passed to the kubelet's `--node-labels`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// Taints the node registers with, each `key[=value]:Effect`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub register_with_taints: Vec<String>,
}

/// How configuration changes are rolled out.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// The strategy (default `OnDelete`: deleting the Node triggers the repave).
    #[serde(rename = "type", default)]
    pub type_: UpdateStrategyType,
    /// For `RollingUpdate`: how many machines may be unavailable at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<i32>,
}

/// The rollout strategies.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UpdateStrategyType {
    /// The operator drains and deletes the Node; the agent then repaves with the new version.
    #[default]
    OnDelete,
    /// Reserved: automated cordon, drain and delete.
    RollingUpdate,
}

/// The observed state of a configuration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigurationStatus {
    /// The highest version number created so far (numbers are never reused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_version: Option<i32>,
    /// The version still editable (not yet deployed); 0 when all are deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<i32>,
    /// The latest observations of the configuration's state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
