//! Conversion between Machina objects and the agent config: round trips both ways, overlay rules,
//! the camelCase wire names at `spec.agent.localDNS` and `spec.agent.downloads.coreDNS`, and the
//! errors for a config that cannot name a Machine.

use std::collections::BTreeMap;

use agent::config::{
    ClusterConfig, DownloadSource, DownloadsConfig, KubeletAuth, KubeletConfig, LocalDnsConfig, RawConfig,
    ZoneOverrideConfig,
};
use agent::machina::convert::{ApplyToConfig, MachineFromConfig, effective_agent_config};
use agent::machina::machine_configuration_version::{parse_version_object_name, version_object_name};
use agent::machina::{
    AgentDownloadsSpec, AgentSpec, ConversionError, DownloadSourceSpec, KubernetesSpec, LocalDnsSpec,
    LocalObjectReference, Machine, MachineConfigurationKubernetes, MachineConfigurationTemplate, MachineSpec,
};
use proptest::prelude::*;

fn full_local_dns() -> LocalDnsConfig {
    LocalDnsConfig {
        enabled: Some(true),
        node_listener_ip: Some("169.254.20.10".into()),
        cluster_listener_ip: Some("169.254.20.11".into()),
        metrics_address: Some("192.168.101.10:9253".into()),
        cpu_limit_in_milli_cores: Some(2008),
        memory_limit_in_mb: Some(256),
        required_plugins: Some(vec!["hosts".into(), "rewrite".into()]),
        corefile_template: Some(".:53 {\n    bind {{ node_listener }}\n}\n".into()),
        notrack_replies: Some(false),
        node_listener_overrides: Some(BTreeMap::from([(
            "example.com".into(),
            ZoneOverrideConfig {
                query_logging: Some("Log".into()),
                forward_destination: Some("ClusterDNS".into()),
                cache_success_ttl_in_seconds: Some(20),
                serve_stale: Some("Immediate".into()),
                ..Default::default()
            },
        )])),
        cluster_listener_overrides: Some(BTreeMap::from([(
            ".".into(),
            ZoneOverrideConfig {
                protocol: Some("PreferUDP".into()),
                forward_policy: Some("RoundRobin".into()),
                max_concurrent: Some(50),
                cache_duration_in_seconds: Some(60),
                cache_success_capacity: Some(100),
                cache_denial_capacity: Some(200),
                cache_denial_ttl_in_seconds: Some(5),
                serve_stale_duration_in_seconds: Some(600),
                ..Default::default()
            },
        )])),
    }
}

fn full_config() -> RawConfig {
    RawConfig {
        machine_name: Some("host-a".into()),
        node_name: Some("node-a".into()),
        cluster: Some(ClusterConfig {
            version: Some("v1.35.0".into()),
            ..Default::default()
        }),
        kubelet: Some(KubeletConfig {
            labels: BTreeMap::from([("unbounded-cloud.io/site".into(), "lab".into())]),
            register_with_taints: vec!["dedicated=dns:NoSchedule".into()],
            ..Default::default()
        }),
        downloads: Some(DownloadsConfig {
            kubernetes: Some(DownloadSource {
                base_url: Some("http://192.168.101.1:8080/k8s".into()),
                allow_http: Some(true),
                ..Default::default()
            }),
            core_dns: Some(DownloadSource {
                url: Some("http://192.168.101.1:8080/coredns_{version}_linux_{arch}.tgz".into()),
                base_url: Some("http://192.168.101.1:8080/coredns".into()),
                version: Some("1.12.4".into()),
                sha256: Some([("coredns".to_owned(), "ab".repeat(32))].into()),
                allow_http: Some(true),
            }),
        }),
        local_dns: Some(full_local_dns()),
        ..Default::default()
    }
}

/// Cluster facts a Machine does not carry; they come from the base config.
fn base_with_cluster_facts() -> RawConfig {
    RawConfig {
        cluster: Some(ClusterConfig {
            ca_cert_base64: Some("Q0E=".into()),
            cluster_dns: Some("10.96.0.10".into()),
            version: Some("v1.34.0".into()),
        }),
        kubelet: Some(KubeletConfig {
            api_server: Some("https://192.168.101.1:6443".into()),
            auth: Some(KubeletAuth {
                bootstrap_token: Some("abcdef.0123456789abcdef".into()),
            }),
            labels: BTreeMap::from([("role".into(), "base".into())]),
            ..Default::default()
        }),
        host_prefix: Some("/opt/unbounded".into()),
        ..Default::default()
    }
}

#[test]
fn full_config_round_trips_through_a_machine() {
    let config = full_config();
    let machine = Machine::from_agent_config(&config).unwrap();
    assert_eq!(machine.metadata.name.as_deref(), Some("host-a"));
    assert_eq!(machine.to_agent_config(RawConfig::default()), config);
}

#[test]
fn machine_round_trips_through_a_config() {
    let machine = Machine::new(
        "host-b",
        MachineSpec {
            kubernetes: Some(KubernetesSpec {
                version: Some("v1.35.1".into()),
                node_ref: Some(LocalObjectReference {
                    name: "node-b".into(),
                }),
                node_labels: BTreeMap::from([("a".into(), "1".into())]),
                register_with_taints: vec!["x:NoExecute".into()],
                bootstrap_token_ref: None,
            }),
            agent: Some(AgentSpec {
                image: None,
                local_dns: Some(LocalDnsSpec::from(&full_local_dns())),
                downloads: Some(AgentDownloadsSpec {
                    kubernetes: None,
                    core_dns: Some(DownloadSourceSpec {
                        version: Some("1.12.4".into()),
                        ..Default::default()
                    }),
                }),
            }),
            configuration_ref: None,
        },
    );
    let config = machine.to_agent_config(RawConfig::default());
    assert_eq!(Machine::from_agent_config(&config).unwrap(), machine);
}

#[test]
fn machine_settings_overlay_the_base_and_keep_what_it_does_not_carry() {
    let machine = Machine::from_agent_config(&full_config()).unwrap();
    let config = machine.to_agent_config(base_with_cluster_facts());
    let cluster = config.cluster.as_ref().unwrap();
    assert_eq!(
        cluster.version.as_deref(),
        Some("v1.35.0"),
        "the machine's version wins"
    );
    assert_eq!(cluster.cluster_dns.as_deref(), Some("10.96.0.10"));
    assert_eq!(cluster.ca_cert_base64.as_deref(), Some("Q0E="));
    let kubelet = config.kubelet.as_ref().unwrap();
    assert_eq!(kubelet.api_server.as_deref(), Some("https://192.168.101.1:6443"));
    assert!(kubelet.auth.as_ref().unwrap().bootstrap_token.is_some());
    assert_eq!(
        kubelet.labels.get("role").map(String::as_str),
        Some("base"),
        "labels are merged"
    );
    assert_eq!(
        kubelet.labels.get("unbounded-cloud.io/site").map(String::as_str),
        Some("lab")
    );
    assert_eq!(config.host_prefix.as_deref(), Some("/opt/unbounded"));
    assert_eq!(config.local_dns, Some(full_local_dns()));
}

#[test]
fn local_dns_fields_absent_from_the_machine_keep_the_configured_values() {
    let mut machine = Machine::new("host-c", MachineSpec::default());
    machine.spec.agent = Some(AgentSpec {
        local_dns: Some(LocalDnsSpec {
            enabled: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    });
    let base = RawConfig {
        local_dns: Some(full_local_dns()),
        ..Default::default()
    };
    let local_dns = machine.to_agent_config(base).local_dns.unwrap();
    assert_eq!(
        local_dns,
        LocalDnsConfig {
            enabled: Some(false),
            ..full_local_dns()
        }
    );
}

#[test]
fn machine_settings_win_over_the_configuration_template() {
    let template = MachineConfigurationTemplate {
        kubernetes: Some(MachineConfigurationKubernetes {
            version: Some("v1.34.2".into()),
            node_labels: BTreeMap::from([("tier".into(), "template".into())]),
            register_with_taints: vec![],
        }),
        agent: Some(AgentSpec {
            local_dns: Some(LocalDnsSpec {
                enabled: Some(true),
                memory_limit_in_mb: Some(512),
                ..Default::default()
            }),
            downloads: Some(AgentDownloadsSpec {
                core_dns: Some(DownloadSourceSpec {
                    base_url: Some("http://mirror/coredns".into()),
                    ..Default::default()
                }),
                kubernetes: None,
            }),
            image: None,
        }),
    };
    let mut machine = Machine::new("host-d", MachineSpec::default());
    machine.spec.agent = Some(AgentSpec {
        local_dns: Some(LocalDnsSpec {
            memory_limit_in_mb: Some(64),
            ..Default::default()
        }),
        downloads: Some(AgentDownloadsSpec {
            core_dns: Some(DownloadSourceSpec {
                version: Some("1.12.4".into()),
                ..Default::default()
            }),
            kubernetes: None,
        }),
        image: None,
    });
    let config = effective_agent_config(RawConfig::default(), Some(&template), &machine);
    let local_dns = config.local_dns.unwrap();
    assert_eq!(
        (local_dns.enabled, local_dns.memory_limit_in_mb),
        (Some(true), Some(64))
    );
    let core_dns = config.downloads.unwrap().core_dns.unwrap();
    assert_eq!(core_dns.base_url.as_deref(), Some("http://mirror/coredns"));
    assert_eq!(core_dns.version.as_deref(), Some("1.12.4"));
    assert_eq!(config.cluster.unwrap().version.as_deref(), Some("v1.34.2"));
    assert_eq!(config.machine_name.as_deref(), Some("host-d"));
}

#[test]
fn machine_yaml_uses_the_camel_case_names_of_the_config_fields() {
    let yaml = r#"
apiVersion: unbounded-cloud.io/v1alpha3
kind: Machine
metadata:
  name: host-e
spec:
  agent:
    localDNS:
      enabled: true
      nodeListenerIP: 169.254.20.10
      clusterListenerIP: 169.254.20.11
      metricsAddress: 192.168.101.10:9253
      cpuLimitInMilliCores: 2008
      memoryLimitInMB: 256
      requiredPlugins: [hosts, rewrite]
      corefileTemplate: ".:53 {\n    bind {{ node_listener }}\n}\n"
      notrackReplies: false
      nodeListenerOverrides:
        example.com:
          queryLogging: Log
          forwardDestination: ClusterDNS
          cacheSuccessTTLInSeconds: 20
          serveStale: Immediate
      clusterListenerOverrides:
        ".":
          protocol: PreferUDP
          forwardPolicy: RoundRobin
          maxConcurrent: 50
          cacheDurationInSeconds: 60
          cacheSuccessCapacity: 100
          cacheDenialCapacity: 200
          cacheDenialTTLInSeconds: 5
          serveStaleDurationInSeconds: 600
    downloads:
      coreDNS:
        url: "http://192.168.101.1:8080/coredns_{version}_linux_{arch}.tgz"
        baseURL: http://192.168.101.1:8080/coredns
        version: 1.12.4
        sha256:
          coredns: abababababababababababababababababababababababababababababababab
        allowHTTP: true
"#;
    let machine: Machine = serde_yaml_ng::from_str(yaml).unwrap();
    let config = machine.to_agent_config(RawConfig::default());
    assert_eq!(config.local_dns, Some(full_local_dns()));
    assert_eq!(
        config.downloads.unwrap().core_dns,
        full_config().downloads.unwrap().core_dns
    );

    let json = serde_json::to_value(&machine).unwrap();
    let keys: Vec<&str> = json["spec"]["agent"]["localDNS"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "clusterListenerIP",
            "clusterListenerOverrides",
            "corefileTemplate",
            "cpuLimitInMilliCores",
            "enabled",
            "memoryLimitInMB",
            "metricsAddress",
            "nodeListenerIP",
            "nodeListenerOverrides",
            "notrackReplies",
            "requiredPlugins",
        ]
    );
}

#[test]
fn config_without_a_machine_name_is_refused() {
    let config = RawConfig {
        machine_name: None,
        ..full_config()
    };
    let err = Machine::from_agent_config(&config).unwrap_err();
    assert_eq!(err, ConversionError::MissingMachineName);
    assert!(err.to_string().starts_with("MachineName: "), "{err}");
}

#[test]
fn config_whose_machine_name_is_no_object_name_is_refused_naming_it() {
    for bad in ["", "Host_A", "-host", "host.", &"a".repeat(254)] {
        let config = RawConfig {
            machine_name: Some(bad.to_owned()),
            ..Default::default()
        };
        let err = Machine::from_agent_config(&config).unwrap_err();
        assert!(
            matches!(err, ConversionError::InvalidMachineName { ref name, .. } if name == bad),
            "{bad:?}: {err}"
        );
        assert!(err.to_string().starts_with("MachineName: "), "{err}");
    }
}

#[test]
fn version_object_names_are_configuration_dash_v_number() {
    assert_eq!(version_object_name("workers", 3), "workers-v3");
    assert_eq!(parse_version_object_name("workers-v3"), Some(("workers", 3)));
    assert_eq!(parse_version_object_name("my-v-cfg-v12"), Some(("my-v-cfg", 12)));
    for bad in [
        "workers",
        "workers-v",
        "workers-v0",
        "-v3",
        "workers-v3a",
        "workers-v-1",
    ] {
        assert_eq!(parse_version_object_name(bad), None, "{bad}");
    }
}

fn opt<T: std::fmt::Debug + Clone>(s: impl Strategy<Value = T>) -> impl Strategy<Value = Option<T>> {
    proptest::option::of(s)
}

fn local_dns_strategy() -> impl Strategy<Value = LocalDnsConfig> {
    (
        (
            opt(any::<bool>()),
            opt("[0-9.]{1,15}"),
            opt("[0-9.]{1,15}"),
            opt("[0-9.:]{1,21}"),
        ),
        (
            opt(any::<i64>()),
            opt(any::<i64>()),
            opt(prop::collection::vec("[a-z_-]{1,8}", 0..4)),
        ),
        (
            opt(".{0,40}"),
            opt(any::<bool>()),
            opt(zones_strategy()),
            opt(zones_strategy()),
        ),
    )
        .prop_map(
            |(
                (enabled, node, cluster, metrics),
                (cpu, mem, plugins),
                (template, notrack, node_zones, cluster_zones),
            )| LocalDnsConfig {
                enabled,
                node_listener_ip: node,
                cluster_listener_ip: cluster,
                metrics_address: metrics,
                cpu_limit_in_milli_cores: cpu,
                memory_limit_in_mb: mem,
                required_plugins: plugins,
                corefile_template: template,
                notrack_replies: notrack,
                node_listener_overrides: node_zones,
                cluster_listener_overrides: cluster_zones,
            },
        )
}

fn zones_strategy() -> impl Strategy<Value = BTreeMap<String, ZoneOverrideConfig>> {
    let zone = (
        (
            opt("[A-Za-z]{1,8}"),
            opt("[A-Za-z]{1,8}"),
            opt("[A-Za-z]{1,8}"),
            opt("[A-Za-z]{1,8}"),
        ),
        (
            opt(any::<i64>()),
            opt(any::<i64>()),
            opt(any::<i64>()),
            opt(any::<i64>()),
        ),
        (
            opt(any::<i64>()),
            opt(any::<i64>()),
            opt("[A-Za-z]{1,8}"),
            opt(any::<i64>()),
        ),
    )
        .prop_map(
            |(
                (log, protocol, destination, policy),
                (max, duration, success, success_ttl),
                (denial, denial_ttl, stale, stale_for),
            )| {
                ZoneOverrideConfig {
                    query_logging: log,
                    protocol,
                    forward_destination: destination,
                    forward_policy: policy,
                    max_concurrent: max,
                    cache_duration_in_seconds: duration,
                    cache_success_capacity: success,
                    cache_success_ttl_in_seconds: success_ttl,
                    cache_denial_capacity: denial,
                    cache_denial_ttl_in_seconds: denial_ttl,
                    serve_stale: stale,
                    serve_stale_duration_in_seconds: stale_for,
                }
            },
        );
    prop::collection::btree_map("[a-z.]{1,12}", zone, 0..3)
}

fn download_strategy() -> impl Strategy<Value = DownloadSource> {
    (
        opt("[a-z:/.{}_]{0,20}"),
        opt("[a-z:/.]{0,20}"),
        opt("[0-9.]{1,8}"),
        proptest::option::of(proptest::collection::btree_map(
            "[a-z]{1,8}",
            "[0-9a-f]{64}",
            0..3,
        )),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(|(url, base_url, version, sha256, allow_http)| DownloadSource {
            url,
            base_url,
            version,
            sha256,
            allow_http,
        })
}

proptest! {
    /// Any config's Machina-carried part survives config → Machine → config unchanged.
    #[test]
    fn carried_settings_survive_config_to_machine_to_config(
        local_dns in opt(local_dns_strategy()),
        core_dns in opt(download_strategy()),
        kubernetes in opt(download_strategy()),
        version in opt("v1\\.[0-9]{2}\\.[0-9]"),
        node in opt("[a-z][a-z0-9-]{0,10}"),
        labels in prop::collection::btree_map("[a-z./]{1,10}", "[a-z0-9]{0,5}", 0..3),
        taints in prop::collection::vec("[a-z]{1,5}(=[a-z]{1,3})?:NoSchedule", 0..3),
    ) {
        let downloads = (core_dns.is_some() || kubernetes.is_some())
            .then_some(DownloadsConfig { kubernetes, core_dns });
        let kubelet = (!labels.is_empty() || !taints.is_empty()).then(|| KubeletConfig {
            labels,
            register_with_taints: taints,
            ..Default::default()
        });
        let config = RawConfig {
            machine_name: Some("host-p".into()),
            node_name: node,
            cluster: version.map(|v| ClusterConfig { version: Some(v), ..Default::default() }),
            kubelet,
            downloads,
            local_dns,
            ..Default::default()
        };
        let machine = Machine::from_agent_config(&config).unwrap();
        let back: Machine = serde_json::from_value(serde_json::to_value(&machine).unwrap()).unwrap();
        prop_assert_eq!(&back, &machine);
        prop_assert_eq!(back.to_agent_config(RawConfig::default()), config);
    }
}
