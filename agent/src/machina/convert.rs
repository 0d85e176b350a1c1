//! Conversion between the Machina settings (`Machine`, `MachineConfigurationTemplate`) and the
//! agent config ([`RawConfig`]).
//!
//! | Machina | agent config |
//! |---|---|
//! | `metadata.name` (Machine) | `MachineName` |
//! | `spec.kubernetes.version` | `Cluster.Version` |
//! | `spec.kubernetes.nodeRef.name` | `NodeName` |
//! | `spec.kubernetes.nodeLabels` | `Kubelet.Labels` |
//! | `spec.kubernetes.registerWithTaints` | `Kubelet.RegisterWithTaints` |
//! | `spec.agent.localDNS.<field>` | `LocalDNS.<Field>` |
//! | `spec.agent.downloads.{kubernetes,coreDNS}` | `Downloads.{Kubernetes,CoreDNS}` |
//!
//! The rest of the agent config (cluster CA, API server, cluster DNS, bootstrap token, machine and
//! container images, `HostPrefix`, offline artifacts) is not in a Machine: `bootstrapTokenRef`
//! names a Secret and `agent.image` an OCI image, which the caller resolves. So a Machine is
//! *applied to* a base config: a field set in the spec replaces the config's value, an absent one
//! leaves it, node labels are merged (the spec's win). A configuration's template applies the same
//! way, before the machine's own settings ([`effective_agent_config`]).

use std::collections::BTreeMap;

use crate::config::{
    DownloadSource, DownloadsConfig, KubeletConfig, LocalDnsConfig, RawConfig, ZoneOverrideConfig,
};
use crate::names::{DnsName, NameError};

use super::agent_spec::{AgentDownloadsSpec, AgentSpec, DownloadSourceSpec, LocalDnsSpec, ZoneOverrideSpec};
use super::machine::{KubernetesSpec, LocalObjectReference, Machine, MachineSpec};
use super::machine_configuration::{MachineConfigurationKubernetes, MachineConfigurationTemplate};

/// Why an agent config cannot become a Machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("MachineName: missing; it names the Machine")]
    MissingMachineName,
    /// A Machine is cluster-scoped: its name must be a DNS subdomain name, as [`DnsName`] checks.
    #[error("MachineName: {reason} (a Machine's name must be a DNS subdomain name)")]
    InvalidMachineName { name: String, reason: NameError },
}

/// Converts between a Machina spec type and the agent config type with the same fields (of the same
/// types), both ways, and overlays the spec on a config field by field. Both sides are destructured
/// whole, so a field added to one type and not the other does not compile.
macro_rules! mirror_fields {
    ($spec:ident <=> $config:ident { $($field:ident),+ $(,)? }) => {
        impl From<&$spec> for $config {
            fn from(spec: &$spec) -> Self {
                let $spec { $($field),+ } = spec.clone();
                $config { $($field: Mirror::mirror($field)),+ }
            }
        }

        impl From<&$config> for $spec {
            fn from(config: &$config) -> Self {
                let $config { $($field),+ } = config.clone();
                $spec { $($field: Mirror::mirror($field)),+ }
            }
        }

        impl Overlay<$config> for $spec {
            fn overlay(&self, base: Option<$config>) -> $config {
                let base = base.unwrap_or_default();
                let spec = $config::from(self);
                $config { $($field: spec.$field.or(base.$field)),+ }
            }
        }
    };
}

/// A Machina spec laid over the agent config's section of the same fields.
pub trait Overlay<C> {
    /// Overlays the fields set here on `base` (absent fields keep `base`'s values).
    fn overlay(&self, base: Option<C>) -> C;
}

/// A Machina object's settings applied onto an agent config (see the module's table).
pub trait ApplyToConfig {
    /// Applies the settings to `config`.
    fn apply_to(&self, config: &mut RawConfig);

    /// `base` with the settings applied.
    fn to_agent_config(&self, mut base: RawConfig) -> RawConfig {
        self.apply_to(&mut base);
        base
    }
}

/// The Machine an agent config describes.
pub trait MachineFromConfig: Sized {
    /// Named after `MachineName`; no status, no configuration reference.
    fn from_agent_config(config: &RawConfig) -> Result<Self, ConversionError>;
}

/// A field's value on the other side of [`mirror_fields`]: itself, or a map of mirrored values.
trait Mirror<T> {
    fn mirror(self) -> T;
}

impl<T> Mirror<T> for T {
    fn mirror(self) -> T {
        self
    }
}

impl Mirror<Option<BTreeMap<String, ZoneOverrideConfig>>> for Option<BTreeMap<String, ZoneOverrideSpec>> {
    fn mirror(self) -> Option<BTreeMap<String, ZoneOverrideConfig>> {
        self.map(|zones| zones.iter().map(|(zone, s)| (zone.clone(), s.into())).collect())
    }
}

impl Mirror<Option<BTreeMap<String, ZoneOverrideSpec>>> for Option<BTreeMap<String, ZoneOverrideConfig>> {
    fn mirror(self) -> Option<BTreeMap<String, ZoneOverrideSpec>> {
        self.map(|zones| zones.iter().map(|(zone, s)| (zone.clone(), s.into())).collect())
    }
}

mirror_fields!(ZoneOverrideSpec <=> ZoneOverrideConfig {
    query_logging,
    protocol,
    forward_destination,
    forward_policy,
    max_concurrent,
    cache_duration_in_seconds,
    cache_success_capacity,
    cache_success_ttl_in_seconds,
    cache_denial_capacity,
    cache_denial_ttl_in_seconds,
    serve_stale,
    serve_stale_duration_in_seconds,
});

mirror_fields!(LocalDnsSpec <=> LocalDnsConfig {
    enabled,
    node_listener_ip,
    cluster_listener_ip,
    metrics_address,
    cpu_limit_in_milli_cores,
    memory_limit_in_mb,
    required_plugins,
    corefile_template,
    notrack_replies,
    node_listener_overrides,
    cluster_listener_overrides,
});

mirror_fields!(DownloadSourceSpec <=> DownloadSource { url, base_url, version, sha256, allow_http });

/// The agent settings an agent config carries; `None` when it has neither LocalDNS nor downloads.
pub fn agent_spec_of(config: &RawConfig) -> Option<AgentSpec> {
    let local_dns = config.local_dns.as_ref().map(LocalDnsSpec::from);
    let downloads = config.downloads.as_ref().map(|downloads| AgentDownloadsSpec {
        kubernetes: downloads.kubernetes.as_ref().map(DownloadSourceSpec::from),
        core_dns: downloads.core_dns.as_ref().map(DownloadSourceSpec::from),
    });
    (local_dns.is_some() || downloads.is_some()).then_some(AgentSpec {
        image: None,
        local_dns,
        downloads,
    })
}

impl ApplyToConfig for AgentSpec {
    /// Applies LocalDNS and the download overrides to `config` (`image` is not converted).
    fn apply_to(&self, config: &mut RawConfig) {
        if let Some(local_dns) = &self.local_dns {
            config.local_dns = Some(local_dns.overlay(config.local_dns.take()));
        }
        if let Some(downloads) = &self.downloads {
            let target = config.downloads.get_or_insert_with(DownloadsConfig::default);
            if let Some(kubernetes) = &downloads.kubernetes {
                target.kubernetes = Some(kubernetes.overlay(target.kubernetes.take()));
            }
            if let Some(core_dns) = &downloads.core_dns {
                target.core_dns = Some(core_dns.overlay(target.core_dns.take()));
            }
        }
    }
}

/// Applies a Kubernetes version, node labels and taints to `config`.
fn apply_kubernetes(
    version: Option<&String>,
    node_labels: &std::collections::BTreeMap<String, String>,
    register_with_taints: &[String],
    config: &mut RawConfig,
) {
    if let Some(version) = version {
        config.cluster.get_or_insert_with(Default::default).version = Some(version.clone());
    }
    if !node_labels.is_empty() {
        let kubelet = config.kubelet.get_or_insert_with(KubeletConfig::default);
        kubelet
            .labels
            .extend(node_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    if !register_with_taints.is_empty() {
        config
            .kubelet
            .get_or_insert_with(KubeletConfig::default)
            .register_with_taints = register_with_taints.to_vec();
    }
}

impl ApplyToConfig for MachineConfigurationTemplate {
    /// Applies the template's Kubernetes and agent settings to `config`.
    fn apply_to(&self, config: &mut RawConfig) {
        if let Some(MachineConfigurationKubernetes {
            version,
            node_labels,
            register_with_taints,
        }) = &self.kubernetes
        {
            apply_kubernetes(version.as_ref(), node_labels, register_with_taints, config);
        }
        if let Some(agent) = &self.agent {
            agent.apply_to(config);
        }
    }
}

impl MachineFromConfig for Machine {
    fn from_agent_config(config: &RawConfig) -> Result<Machine, ConversionError> {
        let name = config
            .machine_name
            .as_deref()
            .ok_or(ConversionError::MissingMachineName)?;
        name.parse::<DnsName>()
            .map_err(|reason| ConversionError::InvalidMachineName {
                name: name.to_owned(),
                reason,
            })?;
        let kubelet = config.kubelet.clone().unwrap_or_default();
        let kubernetes = KubernetesSpec {
            version: config
                .cluster
                .as_ref()
                .and_then(|cluster| cluster.version.clone()),
            node_ref: config.node_name.clone().map(|name| LocalObjectReference { name }),
            node_labels: kubelet.labels,
            register_with_taints: kubelet.register_with_taints,
            bootstrap_token_ref: None,
        };
        let spec = MachineSpec {
            kubernetes: (kubernetes != KubernetesSpec::default()).then_some(kubernetes),
            agent: agent_spec_of(config),
            configuration_ref: None,
        };
        Ok(Machine::new(name, spec))
    }
}

impl ApplyToConfig for Machine {
    /// Applies the Machine's name and settings to `config` (see the module's table).
    fn apply_to(&self, config: &mut RawConfig) {
        if let Some(name) = &self.metadata.name {
            config.machine_name = Some(name.clone());
        }
        if let Some(kubernetes) = &self.spec.kubernetes {
            if let Some(node_ref) = &kubernetes.node_ref {
                config.node_name = Some(node_ref.name.clone());
            }
            apply_kubernetes(
                kubernetes.version.as_ref(),
                &kubernetes.node_labels,
                &kubernetes.register_with_taints,
                config,
            );
        }
        if let Some(agent) = &self.spec.agent {
            agent.apply_to(config);
        }
    }
}

/// The agent config for `machine`: `base`, then the configuration version's template, then the
/// machine's own settings.
pub fn effective_agent_config(
    base: RawConfig,
    template: Option<&MachineConfigurationTemplate>,
    machine: &Machine,
) -> RawConfig {
    let mut config = base;
    if let Some(template) = template {
        template.apply_to(&mut config);
    }
    machine.apply_to(&mut config);
    config
}
