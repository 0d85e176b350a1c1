//! `MachineConfigurationVersion`: a numbered snapshot of a configuration's template, named
//! `<cfg>-v<N>`, editable until a machine uses it and immutable after (cluster-scoped).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::machine_configuration::MachineConfigurationTemplate;

/// The label naming a version's MachineConfiguration.
pub const CONFIGURATION_LABEL: &str = "unbounded-cloud.io/machine-configuration";
/// The label holding a version's number.
pub const VERSION_LABEL: &str = "unbounded-cloud.io/machine-configuration-version";

/// One version of a MachineConfiguration's template.
// Each `printcolumn(...)` repeats `type_ = ...`, which clippy takes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "unbounded-cloud.io",
    version = "v1alpha3",
    kind = "MachineConfigurationVersion",
    status = "MachineConfigurationVersionStatus",
    shortname = "mcv",
    derive = "PartialEq",
    doc = "A numbered snapshot of a MachineConfiguration's template, immutable once deployed.",
    printcolumn(
        name = "Configuration",
        type_ = "string",
        json_path = ".metadata.labels.unbounded-cloud\\.io/machine-configuration"
    ),
    printcolumn(name = "Version", type_ = "integer", json_path = ".spec.version"),
    printcolumn(name = "Deployed", type_ = "boolean", json_path = ".status.deployed"),
    printcolumn(name = "Machines", type_ = "integer", json_path = ".status.deployedMachines"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigurationVersionSpec {
    /// The version number within its MachineConfiguration, counting from 1.
    #[schemars(range(min = 1))]
    pub version: i32,
    /// The template as it was when this version was created or last edited.
    pub template: MachineConfigurationTemplate,
}

/// The observed state of a version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigurationVersionStatus {
    /// Whether a machine was provisioned with this version; from then on its spec is immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed: Option<bool>,
    /// How many machines use this version now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_machines: Option<i32>,
    /// The latest observations of the version's state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The object name of version `version` of configuration `configuration`: `<cfg>-v<N>`.
pub fn version_object_name(configuration: &str, version: i32) -> String {
    format!("{configuration}-v{version}")
}

/// Splits a version's object name `<cfg>-v<N>` into the configuration name and `N` (≥ 1).
pub fn parse_version_object_name(name: &str) -> Option<(&str, i32)> {
    let (configuration, number) = name.rsplit_once("-v")?;
    if configuration.is_empty() || number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let version: i32 = number.parse().ok()?;
    (version >= 1).then_some((configuration, version))
}
