//! The `agent` section of a `Machine` spec and a `MachineConfiguration` template: the agent's
//! image, its LocalDNS settings (`localDNS`) and download overrides (`downloads`).
//!
//! Field names are the camelCase forms of the agent config's (`NodeListenerIP` → `nodeListenerIP`,
//! `CoreDNS.BaseURL` → `coreDNS.baseURL`). Every field is optional: an absent field leaves the
//! agent config's value (or the spec's default) in place. The agent validates the values.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Settings for the unbounded node agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// The OCI image reference of the nspawn machine (e.g. `ghcr.io/org/repo:tag`). This agent takes
    /// its machine image from the agent config's `MachineImage`, so it does not convert this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// LocalDNS: a CoreDNS cache in the machine in front of the node's and the pods' DNS.
    #[serde(rename = "localDNS", default, skip_serializing_if = "Option::is_none")]
    pub local_dns: Option<LocalDnsSpec>,
    /// Overrides of where the agent downloads its artifacts from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downloads: Option<AgentDownloadsSpec>,
}

/// The LocalDNS settings (agent config section `LocalDNS`); absent fields take the defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct LocalDnsSpec {
    /// Whether LocalDNS is installed (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The listener for the machine and `dnsPolicy: Default` pods (default 169.254.10.10).
    #[serde(rename = "nodeListenerIP", default, skip_serializing_if = "Option::is_none")]
    pub node_listener_ip: Option<String>,
    /// The listener for `ClusterFirst` pods, the kubelet's `clusterDNS` (default 169.254.10.11).
    #[serde(
        rename = "clusterListenerIP",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_listener_ip: Option<String>,
    /// Where CoreDNS serves Prometheus metrics, `IPv4:port` (default derived from the node).
    #[serde(rename = "metricsAddress", default, skip_serializing_if = "Option::is_none")]
    pub metrics_address: Option<String>,
    /// CPU limit of the LocalDNS service in millicores (default 2000).
    #[serde(
        rename = "cpuLimitInMilliCores",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_limit_in_milli_cores: Option<i64>,
    /// Memory limit of the LocalDNS service in MB (default 128).
    #[serde(rename = "memoryLimitInMB", default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_in_mb: Option<i64>,
    /// CoreDNS plugins that must be compiled in, besides the baseline ones.
    #[serde(rename = "requiredPlugins", default, skip_serializing_if = "Option::is_none")]
    pub required_plugins: Option<Vec<String>>,
    /// Replaces the built-in Corefile template whole.
    #[serde(rename = "corefileTemplate", default, skip_serializing_if = "Option::is_none")]
    pub corefile_template: Option<String>,
    /// Also exempt the listeners' replies from connection tracking (default true).
    #[serde(rename = "notrackReplies", default, skip_serializing_if = "Option::is_none")]
    pub notrack_replies: Option<bool>,
    /// Settings by zone of the node listener: `.` or a domain → its settings. Replaces the agent
    /// config's map whole.
    #[serde(
        rename = "nodeListenerOverrides",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub node_listener_overrides: Option<BTreeMap<String, ZoneOverrideSpec>>,
    /// Settings by zone of the cluster listener, likewise.
    #[serde(
        rename = "clusterListenerOverrides",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_listener_overrides: Option<BTreeMap<String, ZoneOverrideSpec>>,
}

/// The settings of one zone of a listener (agent config `LocalDNS.*ListenerOverrides.<zone>`);
/// absent fields take the listener's defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZoneOverrideSpec {
    /// `Error` (default: only errors are logged) or `Log` (a line per query).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_logging: Option<String>,
    /// `ForceTCP` (default) or `PreferUDP`: how CoreDNS asks the zone's servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// `Upstreams` (the node's resolvers) or `ClusterDNS` (the cluster's DNS service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_destination: Option<String>,
    /// `Sequential` (default), `RoundRobin` or `Random`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_policy: Option<String>,
    /// Most queries forwarded at once (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<i64>,
    /// Longest time an answer is cached, in seconds (default 30); 0 turns the cache off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_duration_in_seconds: Option<i64>,
    /// Most positive answers cached (default 9984).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_success_capacity: Option<i64>,
    /// Longest time a positive answer is cached, in place of `cacheDurationInSeconds`.
    #[serde(
        rename = "cacheSuccessTTLInSeconds",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_success_ttl_in_seconds: Option<i64>,
    /// Most negative answers cached (default 9984).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_denial_capacity: Option<i64>,
    /// Longest time a negative answer is cached, in place of `cacheDurationInSeconds`.
    #[serde(
        rename = "cacheDenialTTLInSeconds",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_denial_ttl_in_seconds: Option<i64>,
    /// `Verify` (default), `Immediate` or `Disable`: expired answers served when the servers fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_stale: Option<String>,
    /// How long past expiry an answer may be served stale, in seconds (default 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_stale_duration_in_seconds: Option<i64>,
}

/// Download overrides (agent config section `Downloads`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AgentDownloadsSpec {
    /// Where kubelet and the other Kubernetes binaries come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<DownloadSourceSpec>,
    /// Where the CoreDNS release archive comes from.
    #[serde(rename = "coreDNS", default, skip_serializing_if = "Option::is_none")]
    pub core_dns: Option<DownloadSourceSpec>,
}

/// Where one artifact comes from. `url` wins over `baseURL`; `version` replaces the default version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DownloadSourceSpec {
    /// The whole address; `{version}` and `{arch}` are replaced when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Replaces the upstream release base address (same layout below it).
    #[serde(rename = "baseURL", default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The artifact's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Pinned SHA-256 digests by binary (`kubelet`, `kubectl`, `coredns`). The node's daemon
    /// installs a source a Machine changes only when it is pinned here and lies below a base its
    /// own config allows (`Daemon.AllowedSources`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<std::collections::BTreeMap<String, String>>,
    /// `true`: the source may be plain `http://`. Only the node's own config can turn this on; the
    /// daemon refuses a Machine that does.
    #[serde(rename = "allowHTTP", default, skip_serializing_if = "Option::is_none")]
    pub allow_http: Option<bool>,
}
