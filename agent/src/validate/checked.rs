//! The validated agent config: every value checked, defaults applied, safe types.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::names::{DnsName, MetricsAddress, PluginName, UnicastIpv4, UnitPath, Version};

/// Default node listener (docs/design.md §2).
pub const DEFAULT_NODE_LISTENER: std::net::Ipv4Addr = std::net::Ipv4Addr::new(169, 254, 10, 10);
/// Default cluster listener (docs/design.md §2).
pub const DEFAULT_CLUSTER_LISTENER: std::net::Ipv4Addr = std::net::Ipv4Addr::new(169, 254, 10, 11);
pub const DEFAULT_CPU_LIMIT_MILLICORES: u32 = 2000;
pub const DEFAULT_MEMORY_LIMIT_MB: u32 = 128;
/// Largest accepted `CorefileTemplate`, in bytes (64 KiB).
pub const MAX_COREFILE_TEMPLATE_BYTES: usize = 64 * 1024;
/// Default `HostPrefix`.
pub const DEFAULT_HOST_PREFIX: &str = "/usr/local";

/// A checked agent config.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The host's identity (its Machina `Machine`); defaults to the node name.
    pub machine_name: DnsName,
    pub node_name: DnsName,
    pub cluster: Cluster,
    pub kubelet: Kubelet,
    pub downloads: Downloads,
    pub machine_image: Option<Artifact>,
    pub container_images: Vec<ContainerImage>,
    /// `OfflineArtifacts.Source`: switches every download to the offline bundle.
    pub offline_source: Option<String>,
    pub host_prefix: UnitPath,
    /// `None` when `LocalDNS.Enabled` is false or absent.
    pub local_dns: Option<LocalDns>,
    /// `None` when the config has no `Daemon` section: `start` installs no daemon.
    pub daemon: Option<Daemon>,
}

/// The `Daemon` section, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Daemon {
    /// `Daemon.Token`, trimmed: a token of `unbounded-system/agent-<MachineName>`.
    pub token: String,
    pub claims: crate::service_account_token::Claims,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub ca_cert_base64: String,
    pub cluster_dns: UnicastIpv4,
    pub version: Option<Version>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Kubelet {
    /// `https://…` address of the API server.
    pub api_server: String,
    pub bootstrap_token: String,
    pub labels: BTreeMap<String, String>,
    pub register_with_taints: Vec<String>,
    /// `Kubelet.NodeIP`, split at commas (dual-stack), in the order written.
    pub node_ips: Vec<IpAddr>,
    /// `Kubelet.Configuration` as written (LocalDNS keys override it when rendered).
    pub configuration: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Downloads {
    pub kubernetes: Source,
    pub core_dns: Source,
}

/// One artifact's source override (docs/design.md §4); all optional.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Source {
    pub url: Option<String>,
    pub base_url: Option<String>,
    pub version: Option<Version>,
    /// `SHA256`: pinned digests by binary, lowercase.
    pub sha256: std::collections::BTreeMap<String, String>,
    /// `AllowHTTP`: the source may be plain `http://`.
    pub allow_http: bool,
}

impl Source {
    /// The source as the artifact code takes it.
    pub fn download(&self) -> crate::config::DownloadSource {
        crate::config::DownloadSource {
            url: self.url.clone(),
            base_url: self.base_url.clone(),
            version: self.version.as_ref().map(|v| v.as_str().to_owned()),
            sha256: (!self.sha256.is_empty()).then(|| self.sha256.clone()),
            allow_http: self.allow_http.then_some(true),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub url: String,
    /// Lowercase hex.
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ContainerImage {
    pub reference: String,
    pub url: Option<String>,
    pub sha256: Option<String>,
}

/// The `LocalDNS` section of an enabled config, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalDns {
    pub node_listener: UnicastIpv4,
    pub cluster_listener: UnicastIpv4,
    /// `None`: derived when the goal state is resolved (docs/design.md §5).
    pub metrics_address: Option<MetricsAddress>,
    pub cpu_limit_millicores: u32,
    pub memory_limit_mb: u32,
    /// The baseline plus `RequiredPlugins`, normalised, sorted, without duplicates.
    pub required_plugins: Vec<PluginName>,
    /// `CorefileTemplate`: already known to parse and to use only known variables.
    pub corefile_template: Option<String>,
    pub notrack_replies: bool,
    /// The node listener's zones: the root zone first, then the others by name.
    pub node_zones: Vec<crate::zones::Zone>,
    /// The cluster listener's zones, likewise.
    pub cluster_zones: Vec<crate::zones::Zone>,
}
