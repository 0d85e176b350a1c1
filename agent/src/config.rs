//! The agent config JSON as written by operators (field names of the unbounded agent).
//!
//! These types hold the file as written: every field is optional here, and
//! `crate::validate` turns a `RawConfig` into checked values, reporting every
//! problem with its JSON path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The whole agent config file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RawConfig {
    /// The host's identity (its Machina `Machine`), not the nspawn slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_name: Option<String>,
    /// The Kubernetes node name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downloads: Option<DownloadsConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_image: Option<MachineImageConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_images: Vec<ContainerImageConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline_artifacts: Option<OfflineArtifactsConfig>,
    /// Where the agent's own binary lives on the host (default `/usr/local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_prefix: Option<String>,
    #[serde(rename = "LocalDNS", default, skip_serializing_if = "Option::is_none")]
    pub local_dns: Option<LocalDnsConfig>,
    /// The agent daemon (`unbounded-agent daemon`), installed by `start` when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonConfig>,
}

/// The `Daemon` section: the credentials the daemon starts with, and what a Machine may change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DaemonConfig {
    /// A token of the ServiceAccount `unbounded-system/agent-<MachineName>`; the daemon renews it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The base addresses a Machine may point `Downloads` at, each download pinned
    /// (docs/security.md); without it, only this config's own bases. Read from the node's config
    /// only: a Machine cannot set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_sources: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ClusterConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert_base64: Option<String>,
    /// The cluster DNS service IP (e.g. 10.96.0.10).
    #[serde(rename = "ClusterDNS", default, skip_serializing_if = "Option::is_none")]
    pub cluster_dns: Option<String>,
    /// Kubernetes version of the cluster (e.g. `v1.35.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KubeletConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<KubeletAuth>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub register_with_taints: Vec<String>,
    #[serde(rename = "NodeIP", default, skip_serializing_if = "Option::is_none")]
    pub node_ip: Option<String>,
    /// KubeletConfiguration fields merged into the rendered kubelet config
    /// (LocalDNS keys override these).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub configuration: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KubeletAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_token: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DownloadsConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<DownloadSource>,
    #[serde(rename = "CoreDNS", default, skip_serializing_if = "Option::is_none")]
    pub core_dns: Option<DownloadSource>,
}

/// Where one artifact comes from (docs/design.md §4).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DownloadSource {
    /// The whole address; `{version}` and `{arch}` are replaced when present.
    #[serde(rename = "URL", default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Replaces the upstream release base address.
    #[serde(rename = "BaseURL", default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Pinned SHA-256 digests of the files fetched from this source, by binary (`kubelet`,
    /// `kubectl`; `coredns`: the release archive or binary as downloaded). A pinned file is checked
    /// against its pin, never against a `.sha256` sidecar.
    #[serde(rename = "SHA256", default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<std::collections::BTreeMap<String, String>>,
    /// `true`: this source may be plain `http://` (no TLS). Without it an `http://` address is
    /// refused (docs/security.md).
    #[serde(rename = "AllowHTTP", default, skip_serializing_if = "Option::is_none")]
    pub allow_http: Option<bool>,
}

impl DownloadSource {
    /// The digest pinned for the binary `name`, if any.
    pub fn pinned(&self, name: &str) -> Option<&str> {
        self.sha256.as_ref()?.get(name).map(String::as_str)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineImageConfig {
    #[serde(rename = "URL", default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(rename = "SHA256", default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `true`: `URL` may be plain `http://`.
    #[serde(rename = "AllowHTTP", default, skip_serializing_if = "Option::is_none")]
    pub allow_http: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerImageConfig {
    #[serde(rename = "Ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    #[serde(rename = "URL", default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(rename = "SHA256", default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `true`: `URL` may be plain `http://`.
    #[serde(rename = "AllowHTTP", default, skip_serializing_if = "Option::is_none")]
    pub allow_http: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct OfflineArtifactsConfig {
    /// A directory holding an offline bundle (`manifest.json` at its top).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The `LocalDNS` section (docs/design.md §2). Absent fields take the design's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LocalDnsConfig {
    #[serde(rename = "Enabled", default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(rename = "NodeListenerIP", default, skip_serializing_if = "Option::is_none")]
    pub node_listener_ip: Option<String>,
    #[serde(
        rename = "ClusterListenerIP",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_listener_ip: Option<String>,
    #[serde(rename = "MetricsAddress", default, skip_serializing_if = "Option::is_none")]
    pub metrics_address: Option<String>,
    #[serde(
        rename = "CPULimitInMilliCores",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_limit_in_milli_cores: Option<i64>,
    #[serde(rename = "MemoryLimitInMB", default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_in_mb: Option<i64>,
    #[serde(rename = "RequiredPlugins", default, skip_serializing_if = "Option::is_none")]
    pub required_plugins: Option<Vec<String>>,
    #[serde(rename = "CorefileTemplate", default, skip_serializing_if = "Option::is_none")]
    pub corefile_template: Option<String>,
    #[serde(rename = "NOTRACKReplies", default, skip_serializing_if = "Option::is_none")]
    pub notrack_replies: Option<bool>,
    /// Settings by zone of the node listener (`"."` or a domain → its settings).
    #[serde(
        rename = "NodeListenerOverrides",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub node_listener_overrides: Option<BTreeMap<String, ZoneOverrideConfig>>,
    /// Settings by zone of the cluster listener.
    #[serde(
        rename = "ClusterListenerOverrides",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_listener_overrides: Option<BTreeMap<String, ZoneOverrideConfig>>,
}

/// The settings of one zone of a listener (docs/configuration.md, "Zones"); absent fields take
/// the listener's defaults. The names are AKS LocalDNS's `LocalDNSOverride` fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ZoneOverrideConfig {
    /// `Error` (default: only errors are logged) or `Log` (every query).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_logging: Option<String>,
    /// `ForceTCP` (default) or `PreferUDP`: how CoreDNS asks the zone's servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// `Upstreams` (the node's resolvers) or `ClusterDNS` (`Cluster.ClusterDNS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_destination: Option<String>,
    /// `Sequential` (default), `RoundRobin` or `Random`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_policy: Option<String>,
    /// Most queries forwarded at once (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<i64>,
    /// Longest time an answer is cached (default 30); 0 turns the cache off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_duration_in_seconds: Option<i64>,
    /// Most positive answers cached (default 9984).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_success_capacity: Option<i64>,
    /// Longest time a positive answer is cached, in place of `CacheDurationInSeconds`.
    #[serde(
        rename = "CacheSuccessTTLInSeconds",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_success_ttl_in_seconds: Option<i64>,
    /// Most negative answers (NXDOMAIN, NODATA) cached (default 9984).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_denial_capacity: Option<i64>,
    /// Longest time a negative answer is cached, in place of `CacheDurationInSeconds`.
    #[serde(
        rename = "CacheDenialTTLInSeconds",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_denial_ttl_in_seconds: Option<i64>,
    /// `Verify` (default), `Immediate` or `Disable`: expired answers served when the servers fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_stale: Option<String>,
    /// How long past expiry an answer may be served stale (default 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_stale_duration_in_seconds: Option<i64>,
}

/// RFC 7396 JSON merge patch, as node configs and tests apply it over a config: objects merge
/// recursively, `null` removes a field, anything else replaces.
pub fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    use serde_json::Value;
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}
