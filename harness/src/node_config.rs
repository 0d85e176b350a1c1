//! Node configs (`node-configs/<name>.json`): how a scenario wants a node, turned
//! with the running lab's values into an agent config checked by the agent's own validator.
//!
//! The format follows the upstream e2e's node configs: `name` (default: the
//! file stem), `localDNS`, `nodeLabels`, `registerWithTaints`,
//! `kubeletConfiguration`, `offline`, and `agentConfig`, a JSON merge patch
//! applied over the generated agent config (objects merge, `null` removes a
//! field, anything else replaces); and the lab's own `daemon` (default `true`): the node runs
//! the agent daemon for its Machine (`false` leaves the daemon out; the Machine is made either
//! way, see `deploy::machine`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use agent::config::{
    ClusterConfig, ContainerImageConfig, DaemonConfig, DownloadsConfig, KubeletAuth, KubeletConfig,
    LocalDnsConfig, MachineImageConfig, OfflineArtifactsConfig, RawConfig,
};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One node config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeConfig {
    /// The node's name; defaults to the file stem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(rename = "localDNS", default)]
    pub local_dns: bool,
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub register_with_taints: Vec<String>,
    #[serde(default)]
    pub kubelet_configuration: serde_json::Map<String, Value>,
    /// Take every artifact from the lab's offline bundle.
    #[serde(default)]
    pub offline: bool,
    /// Merged over the generated agent config (JSON merge patch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_config: Option<Value>,
    /// The node runs the agent daemon for its Machine (`Daemon.Token` in the agent config).
    #[serde(default = "runs_the_daemon")]
    pub daemon: bool,
}

fn runs_the_daemon() -> bool {
    true
}

/// A node config file holding `{}`: what each field's absence means.
impl Default for NodeConfig {
    fn default() -> NodeConfig {
        NodeConfig {
            name: None,
            local_dns: false,
            node_labels: BTreeMap::new(),
            register_with_taints: Vec::new(),
            kubelet_configuration: serde_json::Map::new(),
            offline: false,
            agent_config: None,
            daemon: runs_the_daemon(),
        }
    }
}

/// The KubeletConfiguration key that carries the node's pod CIDR to the agent (which writes it
/// into the bridge CNI config's host-local range).
pub const POD_CIDR_KEY: &str = "podCIDR";

/// What only exists once a lab runs.
#[derive(Debug, Clone, PartialEq)]
pub struct LabValues {
    /// `https://192.168.100.3:6443`.
    pub api_server: String,
    /// The cluster CA certificate, PEM.
    pub ca_cert_pem: String,
    pub bootstrap_token: String,
    pub node_ip: Ipv4Addr,
    /// The node's pod CIDR (`10.244.<k>.0/24` for lab VM `k`, see `deploy::plan::pod_cidr`),
    /// given to the agent as the kubelet configuration's `podCIDR` unless the node config sets it.
    pub pod_cidr: String,
    /// The cluster DNS service IP (`10.96.0.10`).
    pub cluster_dns: Ipv4Addr,
    /// The Kubernetes version (`v1.35.0`).
    pub kubernetes_version: String,
    /// Artifact sources on the lab's artifact server.
    pub downloads: DownloadsConfig,
    pub machine_image: Option<MachineImageConfig>,
    pub container_images: Vec<ContainerImageConfig>,
    /// The offline bundle's location, used when the node config says `offline`.
    pub offline_source: Option<String>,
    /// A token of the node's daemon ServiceAccount (`deploy::machine`), made once the node's
    /// Machine exists; `None`: no daemon.
    pub daemon_token: Option<String>,
}

/// A node config that cannot be read or does not give a valid agent config.
#[derive(Debug, thiserror::Error)]
pub enum NodeConfigError {
    #[error("cannot read node config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("node config {path} is not valid: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("node config {name}: `agentConfig` must be a JSON object")]
    AgentConfigNotObject { name: String },
    #[error("node config {name} asks for `offline` but the lab has no offline bundle")]
    NoOfflineBundle { name: String },
    #[error("node config {name} gives an invalid agent config:\n{problems}")]
    Invalid {
        name: String,
        problems: agent::validate::Problems,
    },
}

impl NodeConfig {
    /// Reads a node config; `name` defaults to the file stem.
    pub fn load(path: &Path) -> Result<NodeConfig, NodeConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| NodeConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config: NodeConfig =
            serde_json::from_str(&text).map_err(|source| NodeConfigError::Parse {
                path: path.to_owned(),
                source,
            })?;
        if config.name.is_none() {
            config.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        }
        Ok(config)
    }

    /// The node's name (also its Machina machine name).
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("node")
    }

    /// The agent config for this node in the lab, validated by the agent's validator.
    pub fn agent_config(&self, lab: &LabValues) -> Result<RawConfig, NodeConfigError> {
        let name = self.name().to_owned();
        let mut kubelet_configuration = self.kubelet_configuration.clone();
        kubelet_configuration
            .entry(POD_CIDR_KEY)
            .or_insert_with(|| Value::String(lab.pod_cidr.clone()));
        let generated = RawConfig {
            machine_name: Some(name.clone()),
            node_name: Some(name.clone()),
            cluster: Some(ClusterConfig {
                ca_cert_base64: Some(base64::engine::general_purpose::STANDARD.encode(&lab.ca_cert_pem)),
                cluster_dns: Some(lab.cluster_dns.to_string()),
                version: Some(lab.kubernetes_version.clone()),
            }),
            kubelet: Some(KubeletConfig {
                api_server: Some(lab.api_server.clone()),
                auth: Some(KubeletAuth {
                    bootstrap_token: Some(lab.bootstrap_token.clone()),
                }),
                labels: self.node_labels.clone(),
                register_with_taints: self.register_with_taints.clone(),
                node_ip: Some(lab.node_ip.to_string()),
                configuration: kubelet_configuration,
            }),
            downloads: Some(lab.downloads.clone()),
            machine_image: lab.machine_image.clone(),
            container_images: lab.container_images.clone(),
            offline_artifacts: if self.offline {
                let source = lab
                    .offline_source
                    .clone()
                    .ok_or(NodeConfigError::NoOfflineBundle { name: name.clone() })?;
                Some(OfflineArtifactsConfig { source: Some(source) })
            } else {
                None
            },
            host_prefix: None,
            local_dns: Some(LocalDnsConfig {
                enabled: Some(self.local_dns),
                ..Default::default()
            }),
            daemon: match (&lab.daemon_token, self.daemon) {
                (Some(token), true) => Some(DaemonConfig {
                    token: Some(token.clone()),
                    ..Default::default()
                }),
                _ => None,
            },
        };
        let mut value = serde_json::to_value(&generated).expect("a RawConfig always serialises");
        if let Some(patch) = &self.agent_config {
            if !patch.is_object() {
                return Err(NodeConfigError::AgentConfigNotObject { name });
            }
            merge_patch(&mut value, patch);
        }
        let invalid = |problems| NodeConfigError::Invalid {
            name: name.clone(),
            problems,
        };
        agent::validate::parse_value(value.clone()).map_err(invalid)?;
        agent::validate::load_value(value).map_err(invalid)
    }
}

/// RFC 7396 JSON merge patch (the agent's; re-exported for callers of this module).
pub use agent::config::merge_patch;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn node_configs() -> PathBuf {
        crate::repo::root().join("node-configs")
    }

    pub(crate) fn lab_values() -> LabValues {
        lab()
    }

    /// Example values of lab 1 (see docs/lab.md).
    fn lab() -> LabValues {
        LabValues {
            api_server: "https://192.168.101.1:6443".into(),
            ca_cert_pem: "-----BEGIN CERTIFICATE-----\nMIIBexample\n-----END CERTIFICATE-----\n".into(),
            bootstrap_token: "abcdef.0123456789abcdef".into(),
            node_ip: Ipv4Addr::new(192, 168, 101, 10),
            pod_cidr: "10.244.0.0/24".into(),
            cluster_dns: Ipv4Addr::new(10, 96, 0, 10),
            kubernetes_version: "v1.35.0".into(),
            downloads: DownloadsConfig {
                kubernetes: Some(agent::config::DownloadSource {
                    base_url: Some("http://192.168.101.1:8080/kubernetes".into()),
                    allow_http: Some(true),
                    ..Default::default()
                }),
                core_dns: Some(agent::config::DownloadSource {
                    base_url: Some("http://192.168.101.1:8080/coredns".into()),
                    allow_http: Some(true),
                    ..Default::default()
                }),
            },
            machine_image: None,
            container_images: Vec::new(),
            offline_source: None,
            daemon_token: None,
        }
    }

    #[test]
    fn localdns_node_config_becomes_an_agent_config_that_validates() {
        let node = NodeConfig::load(&node_configs().join("localdns.json")).unwrap();
        let raw = node.agent_config(&lab()).unwrap();
        let config = agent::validate::validate(&raw).unwrap();
        let l = config.local_dns.expect("LocalDNS enabled");
        assert_eq!(l.node_listener.to_string(), "169.254.10.10");
        assert!(l.notrack_replies);
        assert_eq!(config.node_name.as_str(), "localdns");
        assert_eq!(
            config.kubelet.node_ips,
            [std::net::IpAddr::from([192, 168, 101, 10])]
        );
        assert_eq!(config.kubelet.configuration["maxPods"], 30);
        assert_eq!(config.kubelet.configuration[POD_CIDR_KEY], "10.244.0.0/24");
        assert_eq!(config.cluster.cluster_dns.to_string(), "10.96.0.10");
    }

    #[test]
    fn localdns_off_node_config_gives_localdns_disabled() {
        let node = NodeConfig::load(&node_configs().join("localdns-off.json")).unwrap();
        let config = agent::validate::validate(&node.agent_config(&lab()).unwrap()).unwrap();
        assert_eq!(config.local_dns, None);
    }

    #[test]
    fn agent_config_is_merged_over_what_the_harness_generates() {
        let node = NodeConfig {
            name: Some("n1".into()),
            local_dns: true,
            agent_config: Some(
                serde_json::json!({"LocalDNS": {"NodeListenerIP": "169.254.20.10"}, "Kubelet": {"NodeIP": null}}),
            ),
            ..Default::default()
        };
        let raw = node.agent_config(&lab()).unwrap();
        let l = raw.local_dns.unwrap();
        assert_eq!(
            (l.enabled, l.node_listener_ip.as_deref()),
            (Some(true), Some("169.254.20.10"))
        );
        assert_eq!(raw.kubelet.unwrap().node_ip, None);
    }

    #[test]
    fn an_invalid_agent_config_names_the_node_and_every_problem() {
        let node = NodeConfig {
            name: Some("n1".into()),
            local_dns: true,
            agent_config: Some(serde_json::json!({"LocalDNS": {"NodeListenerIP": "127.0.0.1", "Bogus": 1}})),
            ..Default::default()
        };
        let text = node.agent_config(&lab()).unwrap_err().to_string();
        assert!(
            text.starts_with("node config n1 gives an invalid agent config"),
            "{text}"
        );
        assert!(text.contains("LocalDNS.Bogus: unknown field"), "{text}");
        assert!(
            text.contains("LocalDNS.NodeListenerIP: 127.0.0.1 is a loopback address"),
            "{text}"
        );
    }

    #[test]
    fn unknown_node_config_fields_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        std::fs::write(&path, r#"{"localDns": true}"#).unwrap();
        let text = NodeConfig::load(&path).unwrap_err().to_string();
        assert!(text.contains("unknown field `localDns`"), "{text}");
    }

    #[test]
    fn pod_cidr_of_the_lab_goes_to_the_kubelet_configuration_unless_the_node_config_sets_one() {
        let mut node = NodeConfig {
            name: Some("n1".into()),
            ..Default::default()
        };
        let raw = node.agent_config(&lab()).unwrap();
        assert_eq!(raw.kubelet.unwrap().configuration[POD_CIDR_KEY], "10.244.0.0/24");
        node.kubelet_configuration
            .insert(POD_CIDR_KEY.into(), "10.244.9.0/24".into());
        let raw = node.agent_config(&lab()).unwrap();
        assert_eq!(raw.kubelet.unwrap().configuration[POD_CIDR_KEY], "10.244.9.0/24");
    }

    #[test]
    fn localdns_offline_node_config_takes_every_artifact_from_the_bundle() {
        let node = NodeConfig::load(&node_configs().join("localdns-offline.json")).unwrap();
        assert!(node.offline && node.local_dns);
        let values = LabValues {
            offline_source: Some("/mnt/lab".into()),
            ..lab()
        };
        let config = agent::validate::validate(&node.agent_config(&values).unwrap()).unwrap();
        assert_eq!(config.offline_source.as_deref(), Some("/mnt/lab"));
        assert!(config.local_dns.expect("LocalDNS enabled").notrack_replies);
        // The VM name is the node's name: at most 15 characters (a tap-sized name).
        assert!(node.name().len() <= 15, "{}", node.name());
        let online = NodeConfig::load(&node_configs().join("localdns.json")).unwrap();
        let raw = online.agent_config(&values).unwrap();
        assert_eq!(
            raw.offline_artifacts, None,
            "an online node ignores the lab's bundle"
        );
    }

    #[test]
    fn the_daemon_token_goes_to_the_agent_config_unless_the_node_config_leaves_the_daemon_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.json");
        std::fs::write(&path, r#"{"localDNS": true}"#).unwrap();
        let node = NodeConfig::load(&path).unwrap();
        assert!(node.daemon, "a node config that does not say runs the daemon");
        // A token as a TokenRequest gives one: three base64url parts, the middle one JSON claims.
        let part = |json: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
        let token = format!(
            "{}.{}.{}",
            part(r#"{"alg":"RS256"}"#),
            part(
                r#"{"sub":"system:serviceaccount:unbounded-system:agent-d","iat":1700000000,"exp":4102444800}"#
            ),
            part("signature")
        );
        let values = LabValues {
            daemon_token: Some(token.clone()),
            ..lab()
        };
        let raw = node.agent_config(&values).unwrap();
        assert_eq!(raw.daemon.and_then(|d| d.token), Some(token));
        assert_eq!(
            node.agent_config(&lab()).unwrap().daemon,
            None,
            "no token, no daemon"
        );
        std::fs::write(&path, r#"{"localDNS": true, "daemon": false}"#).unwrap();
        let without = NodeConfig::load(&path).unwrap();
        assert!(!without.daemon);
        assert_eq!(without.agent_config(&values).unwrap().daemon, None);
    }

    #[test]
    fn offline_without_a_bundle_is_an_error() {
        let node = NodeConfig {
            name: Some("n1".into()),
            offline: true,
            ..Default::default()
        };
        assert!(matches!(
            node.agent_config(&lab()),
            Err(NodeConfigError::NoOfflineBundle { .. })
        ));
    }

    #[test]
    fn name_defaults_to_the_file_stem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain.json");
        std::fs::write(&path, "{}").unwrap();
        assert_eq!(NodeConfig::load(&path).unwrap().name(), "plain");
    }
}
