//! The goal state: everything LocalDNS decides before anything on the host
//! changes, resolved from a validated config and injected [`HostFacts`].

pub mod facts;
pub mod metrics;
pub mod upstreams;

use std::net::{IpAddr, Ipv4Addr};

pub use facts::{HostFacts, OptionalFacts};

use crate::names::{DnsName, MetricsAddress, PluginName, Slot, UnicastIpv4, UnitPath, Version};
use crate::validate::Config;

/// Where the machine's resolver for kubelet lives (inside the machine).
pub use crate::paths::LOCALDNS_RESOLV_CONF;

/// Why a goal state could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoalError {
    #[error("host resolver contains no usable direct IPv4 nameserver (in {source_file})")]
    NoUpstream { source_file: &'static str },
    #[error(
        "unsupported local caching stub: nameservers {nameservers} in /etc/resolv.conf are not \
         systemd-resolved's 127.0.0.53/127.0.0.54"
    )]
    UnsupportedStub { nameservers: String },
    #[error("split DNS behind systemd-resolved is not supported (routing domains {routes}); only `~.` is")]
    SplitDns { routes: String },
    #[error("host fact `{fact}` is missing; it is needed for {needed_for} (give it in --host-facts)")]
    MissingFact {
        fact: &'static str,
        needed_for: &'static str,
    },
    #[error("no usable metrics address: the default-route address {candidate} is loopback or a wildcard")]
    NoMetricsAddress { candidate: Ipv4Addr },
}

/// The resolved goal state of one machine slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    pub slot: Slot,
    pub node_name: DnsName,
    /// Where the agent binary lives on the host (`<HostPrefix>/bin/unbounded-agent`).
    pub host_prefix: UnitPath,
    pub kubelet: KubeletGoal,
    /// `None` when LocalDNS is disabled.
    pub local_dns: Option<LocalDnsGoal>,
}

/// Kubelet settings LocalDNS decides.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletGoal {
    /// `clusterDNS`: the cluster listener with LocalDNS, else `Cluster.ClusterDNS`.
    pub cluster_dns: Vec<UnicastIpv4>,
    /// `resolvConf`: the LocalDNS resolv.conf with LocalDNS, else what the user set.
    pub resolv_conf: Option<String>,
    /// `Kubelet.Configuration` as written; `clusterDNS`/`resolvConf` above win.
    pub configuration: serde_json::Map<String, serde_json::Value>,
}

/// Everything the LocalDNS files are rendered from.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalDnsGoal {
    pub node_listener: UnicastIpv4,
    pub cluster_listener: UnicastIpv4,
    /// `Cluster.ClusterDNS`, where the cluster listener forwards `.`.
    pub cluster_dns: UnicastIpv4,
    /// Where the node listener forwards `.`: sorted, distinct, never a listener, never empty.
    pub upstreams: Vec<Ipv4Addr>,
    pub metrics_address: MetricsAddress,
    pub cpu_limit_millicores: u32,
    pub memory_limit_mb: u32,
    pub coredns_version: Version,
    /// Baseline plus configured plugins, sorted.
    pub required_plugins: Vec<PluginName>,
    pub corefile_template: Option<String>,
    pub notrack_replies: bool,
    /// The node listener's zones, the root zone first.
    pub node_zones: Vec<crate::zones::Zone>,
    /// The cluster listener's zones, the root zone first.
    pub cluster_zones: Vec<crate::zones::Zone>,
    /// The host resolv.conf without `nameserver` lines and blank lines.
    pub resolv_conf_lines: Vec<String>,
}

/// Resolves the goal state of `slot` from a checked config and the host facts.
pub fn resolve(config: &Config, facts: &HostFacts, slot: Slot) -> Result<Goal, GoalError> {
    let local_dns = match &config.local_dns {
        None => None,
        Some(l) => {
            let listeners = [l.node_listener.addr(), l.cluster_listener.addr()];
            let upstreams = upstreams::discover(facts, &listeners)?;
            let metrics_address = match l.metrics_address {
                Some(m) => m,
                None => metrics::derive(&config.kubelet.node_ips, config.node_name.as_str(), facts)?,
            };
            let coredns_version = match &config.downloads.core_dns.version {
                Some(v) => v.clone(),
                None => crate::artifact::source::COREDNS_DEFAULT_VERSION
                    .parse()
                    .expect("the default CoreDNS version is valid"),
            };
            Some(LocalDnsGoal {
                node_listener: l.node_listener,
                cluster_listener: l.cluster_listener,
                cluster_dns: config.cluster.cluster_dns,
                upstreams,
                metrics_address,
                cpu_limit_millicores: l.cpu_limit_millicores,
                memory_limit_mb: l.memory_limit_mb,
                coredns_version,
                required_plugins: l.required_plugins.clone(),
                corefile_template: l.corefile_template.clone(),
                notrack_replies: l.notrack_replies,
                node_zones: l.node_zones.clone(),
                cluster_zones: l.cluster_zones.clone(),
                resolv_conf_lines: resolv_conf_without_nameservers(&facts.host_resolv_conf),
            })
        }
    };
    let kubelet = match &local_dns {
        Some(l) => KubeletGoal {
            cluster_dns: vec![l.cluster_listener],
            resolv_conf: Some(LOCALDNS_RESOLV_CONF.to_owned()),
            configuration: config.kubelet.configuration.clone(),
        },
        None => KubeletGoal {
            cluster_dns: vec![config.cluster.cluster_dns],
            resolv_conf: config
                .kubelet
                .configuration
                .get("resolvConf")
                .and_then(|v| v.as_str())
                .map(str::to_owned),
            configuration: config.kubelet.configuration.clone(),
        },
    };
    Ok(Goal {
        slot,
        node_name: config.node_name.clone(),
        host_prefix: config.host_prefix.clone(),
        kubelet,
        local_dns,
    })
}

/// The host resolv.conf with every `nameserver` line (whatever the whitespace),
/// every blank line and every comment removed; `search`, `domain` and
/// `options` lines kept, trimmed and with their words joined by one space.
pub fn resolv_conf_without_nameservers(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| {
            w.first()
                .is_some_and(|k| *k != "nameserver" && !k.starts_with(['#', ';']))
        })
        .map(|w| w.join(" "))
        .collect()
}

/// The first IPv4 of a list of addresses, if any.
pub fn first_ipv4(ips: &[IpAddr]) -> Option<Ipv4Addr> {
    ips.iter().find_map(|ip| match ip {
        IpAddr::V4(v4) => Some(*v4),
        IpAddr::V6(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameserver_lines_are_removed_whatever_the_whitespace() {
        let text = "# generated\n\tnameserver 10.0.0.2\n  nameserver\t10.0.0.3\n\nsearch\tlab.example\n  options ndots:2\t\n; x\n";
        assert_eq!(
            resolv_conf_without_nameservers(text),
            ["search lab.example", "options ndots:2"]
        );
    }
}
