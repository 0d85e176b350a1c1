//! The agent config for a Machine: the cluster's facts and the token as the base, the
//! configuration's template and the Machine over it ([`effective_agent_config`]), the flags last;
//! then the agent's own validation.

use base64::Engine as _;

use crate::config::{
    ClusterConfig, KubeletAuth, KubeletConfig, LocalDnsConfig, OfflineArtifactsConfig, RawConfig,
};
use crate::machina::convert::effective_agent_config;
use crate::machina::{Machine, MachineConfigurationTemplate};

use super::cluster::ClusterFacts;
use super::error::ManualBootstrapError;
use super::flags::{Overrides, merge_taint};
use super::token::BootstrapToken;

/// The agent config for `machine` (not validated yet: see [`checked_json`]).
pub fn agent_config(
    facts: &ClusterFacts,
    machine: &Machine,
    template: Option<&MachineConfigurationTemplate>,
    token: &BootstrapToken,
    overrides: &Overrides,
) -> RawConfig {
    let base = RawConfig {
        cluster: Some(ClusterConfig {
            ca_cert_base64: Some(base64::engine::general_purpose::STANDARD.encode(&facts.ca_pem)),
            cluster_dns: Some(facts.cluster_dns.clone()),
            version: None,
        }),
        kubelet: Some(KubeletConfig {
            api_server: Some(facts.api_server.clone()),
            auth: Some(KubeletAuth {
                bootstrap_token: Some(token.to_string()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut config = effective_agent_config(base, template, machine);
    if config.node_name.is_none() {
        config.node_name = config.machine_name.clone();
    }
    let cluster = config.cluster.get_or_insert_with(Default::default);
    if cluster.version.is_none() {
        cluster.version = Some(facts.server_version.clone());
    }

    let kubelet = config.kubelet.get_or_insert_with(Default::default);
    kubelet
        .labels
        .extend(overrides.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    for taint in &overrides.taints {
        merge_taint(&mut kubelet.register_with_taints, taint);
    }
    if let Some(ip) = &overrides.node_ip {
        kubelet.node_ip = Some(ip.clone());
    }
    if overrides.local_dns {
        config
            .local_dns
            .get_or_insert_with(LocalDnsConfig::default)
            .enabled = Some(true);
    }
    if let Some(source) = &overrides.offline_source {
        config
            .offline_artifacts
            .get_or_insert_with(OfflineArtifactsConfig::default)
            .source = Some(source.clone());
    }
    config
}

/// `config` over `base` (the `--base-config` file: what the Machina API does not carry, such as
/// `MachineImage`, `ContainerImages`, `Kubelet.Configuration`): objects merge, `config`'s values
/// win. A base that does not load as an agent config is a one-line error naming its problems.
pub fn over_base(base: &serde_json::Value, config: &RawConfig) -> Result<RawConfig, ManualBootstrapError> {
    let mut merged = base.clone();
    crate::config::merge_patch(
        &mut merged,
        &serde_json::to_value(config).expect("a RawConfig always serialises"),
    );
    crate::validate::load_value(merged).map_err(|problems| ManualBootstrapError::InvalidConfig {
        machine: config.machine_name.clone().unwrap_or_default(),
        problems: problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// `config` as pretty JSON once `agent::validate::parse` accepts that very text; else every
/// problem, `; `-separated on one line.
pub fn checked_json(config: &RawConfig) -> Result<String, ManualBootstrapError> {
    let invalid = |problems: String| ManualBootstrapError::InvalidConfig {
        machine: config.machine_name.clone().unwrap_or_default(),
        problems,
    };
    let text = serde_json::to_string_pretty(config).map_err(|e| invalid(e.to_string()))?;
    crate::validate::parse(&text).map_err(|problems| {
        invalid(
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        )
    })?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::machina::{
        AgentSpec, KubernetesSpec, LocalDnsSpec, LocalObjectReference, MachineConfigurationKubernetes,
        MachineSpec,
    };

    use super::*;

    const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn facts() -> ClusterFacts {
        ClusterFacts {
            api_server: "https://192.0.2.1:6443".into(),
            ca_pem: CA_PEM.into(),
            cluster_dns: "10.96.0.10".into(),
            server_version: "v1.35.4".into(),
        }
    }

    fn token() -> BootstrapToken {
        BootstrapToken::new("abc123", "0123456789abcdef").unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn machine() -> Machine {
        Machine::new(
            "m1",
            MachineSpec {
                kubernetes: Some(KubernetesSpec {
                    node_labels: labels(&[("role", "edge"), ("zone", "a")]),
                    register_with_taints: vec!["dedicated=edge:NoSchedule".into()],
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
    }

    fn template() -> MachineConfigurationTemplate {
        MachineConfigurationTemplate {
            kubernetes: Some(MachineConfigurationKubernetes {
                version: Some("v1.35.0".into()),
                node_labels: labels(&[("pool", "gpu"), ("zone", "b")]),
                register_with_taints: vec![],
            }),
            agent: Some(AgentSpec {
                local_dns: Some(LocalDnsSpec {
                    enabled: Some(false),
                    memory_limit_in_mb: Some(256),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn the_machine_and_its_template_over_the_cluster_facts_give_a_valid_config() {
        let config = agent_config(
            &facts(),
            &machine(),
            Some(&template()),
            &token(),
            &Overrides::default(),
        );
        let text = checked_json(&config).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["MachineName"], "m1");
        assert_eq!(value["NodeName"], "m1");
        assert_eq!(value["Cluster"]["ClusterDNS"], "10.96.0.10");
        assert_eq!(value["Cluster"]["Version"], "v1.35.0", "the template's version");
        let ca = base64::engine::general_purpose::STANDARD
            .decode(value["Cluster"]["CaCertBase64"].as_str().unwrap())
            .unwrap();
        assert_eq!(ca, CA_PEM.as_bytes());
        assert_eq!(value["Kubelet"]["ApiServer"], "https://192.0.2.1:6443");
        assert_eq!(
            value["Kubelet"]["Auth"]["BootstrapToken"],
            "abc123.0123456789abcdef"
        );
        assert_eq!(
            value["Kubelet"]["Labels"],
            serde_json::json!({"pool": "gpu", "role": "edge", "zone": "a"}),
            "the machine's labels win over the template's"
        );
        assert_eq!(
            value["Kubelet"]["RegisterWithTaints"],
            serde_json::json!(["dedicated=edge:NoSchedule"])
        );
        assert_eq!(value["LocalDNS"]["Enabled"], false);
        assert_eq!(value["LocalDNS"]["MemoryLimitInMB"], 256);
        assert!(value.get("OfflineArtifacts").is_none());
    }

    #[test]
    fn flags_win_over_the_machine_and_the_node_ref_names_the_node() {
        let mut m = machine();
        m.spec.kubernetes.as_mut().unwrap().node_ref = Some(LocalObjectReference {
            name: "node-7".into(),
        });
        let overrides = Overrides {
            local_dns: true,
            node_ip: Some("10.0.0.5".into()),
            labels: labels(&[("zone", "c"), ("extra", "1")]),
            taints: vec!["dedicated=flag:NoSchedule".into(), "gpu:NoExecute".into()],
            offline_source: Some("/srv/bundle".into()),
        };
        let config = agent_config(&facts(), &m, None, &token(), &overrides);
        let value: serde_json::Value = serde_json::from_str(&checked_json(&config).unwrap()).unwrap();
        assert_eq!(value["NodeName"], "node-7");
        assert_eq!(value["Cluster"]["Version"], "v1.35.4", "the server's version");
        assert_eq!(
            value["Kubelet"]["Labels"],
            serde_json::json!({"extra": "1", "role": "edge", "zone": "c"})
        );
        assert_eq!(
            value["Kubelet"]["RegisterWithTaints"],
            serde_json::json!(["dedicated=flag:NoSchedule", "gpu:NoExecute"])
        );
        assert_eq!(value["Kubelet"]["NodeIP"], "10.0.0.5");
        assert_eq!(value["LocalDNS"]["Enabled"], true);
        assert_eq!(value["OfflineArtifacts"]["Source"], "/srv/bundle");
    }

    #[test]
    fn a_config_the_agent_refuses_is_one_line_with_every_problem() {
        let mut facts = facts();
        facts.api_server = "http://192.0.2.1:8080".into();
        facts.cluster_dns = "10.96.0.300".into();
        let config = agent_config(&facts, &machine(), None, &token(), &Overrides::default());
        let err = checked_json(&config).unwrap_err().to_string();
        assert!(
            err.starts_with("the agent config for machine \"m1\" is not valid: "),
            "{err}"
        );
        assert!(err.contains("Kubelet.ApiServer: "), "{err}");
        assert!(
            err.contains("; Cluster.ClusterDNS: ") || err.contains("Cluster.ClusterDNS: "),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn the_base_config_gives_what_a_machine_lacks_and_the_rest_wins_over_it() {
        let machine = Machine::new("m1", MachineSpec::default());
        let raw = agent_config(&facts(), &machine, None, &token(), &Overrides::default());
        let base = serde_json::json!({
            "MachineImage": {"URL": "http://192.0.2.1:8080/rootfs.tar.gz", "SHA256": "a".repeat(64), "AllowHTTP": true},
            "Kubelet": {"ApiServer": "https://base.invalid:6443", "Configuration": {"podCIDR": "10.244.1.0/24"}},
            "NodeName": "from-the-base"
        });
        let merged = over_base(&base, &raw).unwrap();
        assert_eq!(
            merged.machine_image.as_ref().and_then(|m| m.url.as_deref()),
            Some("http://192.0.2.1:8080/rootfs.tar.gz")
        );
        let kubelet = merged.kubelet.as_ref().unwrap();
        assert_eq!(
            kubelet.api_server.as_deref(),
            Some("https://192.0.2.1:6443"),
            "the cluster wins"
        );
        assert_eq!(
            kubelet.configuration["podCIDR"], "10.244.1.0/24",
            "the base's own key stays"
        );
        assert_eq!(merged.node_name.as_deref(), Some("m1"), "the Machine wins");
        checked_json(&merged).unwrap();
        let err = over_base(&serde_json::json!({"NoSuchField": 1}), &raw)
            .unwrap_err()
            .to_string();
        assert!(err.contains("NoSuchField"), "{err}");
    }
}
