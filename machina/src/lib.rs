//! The Machina API (group `unbounded-cloud.io`, version `v1alpha3`) as `kube` custom resources.
//!
//! The kinds the node agent reads: [`Machine`] (one per host), [`MachineConfiguration`] (a profile
//! for a class of machines), [`MachineConfigurationVersion`] (`<cfg>-v<N>`, immutable once deployed)
//! and [`MachineOperation`] (one action on a machine). All are cluster-scoped and have a status
//! subresource. The agent's own settings sit under `agent` (LocalDNS at `spec.agent.localDNS`,
//! the CoreDNS download override at `spec.agent.downloads.coreDNS`); [`crds`] renders the
//! CustomResourceDefinitions checked in under `deploy/crd/`, [`daemon_access`] the access a
//! node's daemon gets to its Machine.
//!
//! This crate holds the API's types alone (no agent config, no client): the agent maps them to
//! and from its config (`agent::machina::convert`), the harness and the scenarios make and read
//! the objects with them.

pub mod agent_spec;
pub mod crds;
pub mod daemon_access;
pub mod machine;
pub mod machine_configuration;
pub mod machine_configuration_version;
pub mod machine_operation;

pub use agent_spec::{AgentDownloadsSpec, AgentSpec, DownloadSourceSpec, LocalDnsSpec};
pub use machine::{
    AppliedConfiguration, KubernetesSpec, LocalObjectReference, Machine, MachineConfigurationRef,
    MachinePhase, MachineSpec, MachineStatus,
};
pub use machine_configuration::{
    MachineConfiguration, MachineConfigurationKubernetes, MachineConfigurationSpec,
    MachineConfigurationStatus, MachineConfigurationTemplate, UpdateStrategy, UpdateStrategyType,
};
pub use machine_configuration_version::{
    MachineConfigurationVersion, MachineConfigurationVersionSpec, MachineConfigurationVersionStatus,
};
pub use machine_operation::{
    MachineOperation, MachineOperationSpec, MachineOperationStatus, OperationKind, OperationPhase,
};

/// The API group of every Machina kind.
pub const GROUP: &str = "unbounded-cloud.io";
/// The API version this agent speaks.
pub const VERSION: &str = "v1alpha3";
