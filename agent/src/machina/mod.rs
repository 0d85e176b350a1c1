//! The Machina API (group `unbounded-cloud.io`, version `v1alpha3`) as `kube` custom resources.
//!
//! The kinds the node agent reads: [`Machine`] (one per host), [`MachineConfiguration`] (a profile
//! for a class of machines), [`MachineConfigurationVersion`] (`<cfg>-v<N>`, immutable once deployed)
//! and [`MachineOperation`] (one action on a machine). All are cluster-scoped and have a status
//! subresource. The agent's own settings sit under `agent` (LocalDNS at `spec.agent.localDNS`,
//! the CoreDNS download override at `spec.agent.downloads.coreDNS`); [`convert`] maps them to and
//! from the agent config, [`crds`] renders the CustomResourceDefinitions checked in under
//! `deploy/crd/`.

pub mod agent_spec;
pub mod convert;
pub mod crds;
pub mod daemon_access;
pub mod machine;
pub mod machine_configuration;
pub mod machine_configuration_version;
pub mod machine_operation;

pub use agent_spec::{AgentDownloadsSpec, AgentSpec, DownloadSourceSpec, LocalDnsSpec};
pub use convert::ConversionError;
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
