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

use crate::config::{DownloadSource, DownloadsConfig, KubeletConfig, LocalDnsConfig, RawConfig};

use super::agent_spec::{AgentDownloadsSpec, AgentSpec, DownloadSourceSpec, LocalDnsSpec};
use super::machine::{KubernetesSpec, LocalObjectReference, Machine, MachineSpec};
use super::machine_configuration::{MachineConfigurationKubernetes, MachineConfigurationTemplate};

/// Why an agent config cannot become a Machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("MachineName: missing; it names the Machine")]
    MissingMachineName,
    #[error("MachineName: {name:?} is not a Kubernetes object name: {reason}")]
    InvalidMachineName { name: String, reason: &'static str },
}

impl From<&LocalDnsSpec> for LocalDnsConfig {
    fn from(spec: &LocalDnsSpec) -> Self {
        let LocalDnsSpec {
            enabled,
            node_listener_ip,
            cluster_listener_ip,
            metrics_address,
            cpu_limit_in_milli_cores,
            memory_limit_in_mb,
            required_plugins,
            corefile_template,
            notrack_replies,
        } = spec.clone();
        LocalDnsConfig {
            enabled,
            node_listener_ip,
            cluster_listener_ip,
            metrics_address,
            cpu_limit_in_milli_cores,
            memory_limit_in_mb,
            required_plugins,
            corefile_template,
            notrack_replies,
        }
    }
}

impl From<&LocalDnsConfig> for LocalDnsSpec {
    fn from(config: &LocalDnsConfig) -> Self {
        let LocalDnsConfig {
            enabled,
            node_listener_ip,
            cluster_listener_ip,
            metrics_address,
            cpu_limit_in_milli_cores,
            memory_limit_in_mb,
            required_plugins,
            corefile_template,
            notrack_replies,
        } = config.clone();
        LocalDnsSpec {
            enabled,
            node_listener_ip,
            cluster_listener_ip,
            metrics_address,
            cpu_limit_in_milli_cores,
            memory_limit_in_mb,
            required_plugins,
            corefile_template,
            notrack_replies,
        }
    }
}

impl From<&DownloadSourceSpec> for DownloadSource {
    fn from(spec: &DownloadSourceSpec) -> Self {
        let DownloadSourceSpec {
            url,
            base_url,
            version,
        } = spec.clone();
        DownloadSource {
            url,
            base_url,
            version,
        }
    }
}

impl From<&DownloadSource> for DownloadSourceSpec {
    fn from(source: &DownloadSource) -> Self {
        let DownloadSource {
            url,
            base_url,
            version,
        } = source.clone();
        DownloadSourceSpec {
            url,
            base_url,
            version,
        }
    }
}

impl LocalDnsSpec {
    /// Overlays the fields set here on `base` (absent fields keep `base`'s values).
    pub fn overlay(&self, base: Option<LocalDnsConfig>) -> LocalDnsConfig {
        let base = base.unwrap_or_default();
        let spec = LocalDnsConfig::from(self);
        LocalDnsConfig {
            enabled: spec.enabled.or(base.enabled),
            node_listener_ip: spec.node_listener_ip.or(base.node_listener_ip),
            cluster_listener_ip: spec.cluster_listener_ip.or(base.cluster_listener_ip),
            metrics_address: spec.metrics_address.or(base.metrics_address),
            cpu_limit_in_milli_cores: spec.cpu_limit_in_milli_cores.or(base.cpu_limit_in_milli_cores),
            memory_limit_in_mb: spec.memory_limit_in_mb.or(base.memory_limit_in_mb),
            required_plugins: spec.required_plugins.or(base.required_plugins),
            corefile_template: spec.corefile_template.or(base.corefile_template),
            notrack_replies: spec.notrack_replies.or(base.notrack_replies),
        }
    }
}

impl DownloadSourceSpec {
    /// Overlays the fields set here on `base`.
    pub fn overlay(&self, base: Option<DownloadSource>) -> DownloadSource {
        let base = base.unwrap_or_default();
        DownloadSource {
            url: self.url.clone().or(base.url),
            base_url: self.base_url.clone().or(base.base_url),
            version: self.version.clone().or(base.version),
        }
    }
}

impl AgentSpec {
    /// The agent settings an agent config carries; `None` when it has neither LocalDNS nor downloads.
    pub fn from_agent_config(config: &RawConfig) -> Option<AgentSpec> {
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

    /// Applies LocalDNS and the download overrides to `config` (`image` is not converted).
    pub fn apply_to(&self, config: &mut RawConfig) {
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

impl MachineConfigurationTemplate {
    /// Applies the template's Kubernetes and agent settings to `config`.
    pub fn apply_to(&self, config: &mut RawConfig) {
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

impl Machine {
    /// The Machine an agent config describes (named after `MachineName`; no status, no
    /// configuration reference).
    pub fn from_agent_config(config: &RawConfig) -> Result<Machine, ConversionError> {
        let name = config
            .machine_name
            .as_deref()
            .ok_or(ConversionError::MissingMachineName)?;
        check_object_name(name)?;
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
            agent: AgentSpec::from_agent_config(config),
            configuration_ref: None,
        };
        Ok(Machine::new(name, spec))
    }

    /// Applies the Machine's name and settings to `config` (see the module's table).
    pub fn apply_to(&self, config: &mut RawConfig) {
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

    /// `base` with this Machine applied.
    pub fn to_agent_config(&self, mut base: RawConfig) -> RawConfig {
        self.apply_to(&mut base);
        base
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

/// Checks a cluster-scoped object name (a DNS subdomain: at most 253 characters of lowercase
/// letters, digits, `-` and `.`, starting and ending with a letter or digit).
fn check_object_name(name: &str) -> Result<(), ConversionError> {
    let invalid = |reason| ConversionError::InvalidMachineName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.len() > 253 {
        return Err(invalid("it is longer than 253 characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Err(invalid("only lowercase letters, digits, '-' and '.' are allowed"));
    }
    let alphanumeric = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !alphanumeric(name.as_bytes()[0]) || !alphanumeric(name.as_bytes()[name.len() - 1]) {
        return Err(invalid("it must start and end with a letter or digit"));
    }
    Ok(())
}
