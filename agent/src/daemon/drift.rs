//! Drift (pure): the desired config is the applied one with the Machine's configuration template
//! over it and then the Machine itself (the Machina conversion: Kubernetes version, labels,
//! taints, node name, `agent.localDNS`, downloads, machine image). How it differs from the
//! applied config decides what the daemon does: nothing, `apply` in place, or a repave. Both are
//! compared in the same normal form (each read into the agent's config type and written out
//! again), so a file's formatting is never taken for a change.

use serde_json::Value;

use crate::config::RawConfig;
use crate::lifecycle::change::{classify, normal_form};
use crate::lifecycle::plan::Change;
use crate::machina::convert::effective_agent_config;
use crate::machina::{Machine, MachineConfigurationTemplate};

/// The config the Machine asks for, and how it differs from the applied one.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The desired config, as the file the daemon hands to `apply` or `repave`.
    pub json: Value,
    pub change: Change,
}

/// A desired config the daemon cannot act on; nothing is done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriftError {
    #[error("the applied config cannot be read as an agent config: {0}")]
    Applied(String),
    #[error("the config the Machine asks for is not valid: {0}")]
    Invalid(String),
    #[error("the Machine asks for downloads this node does not take: {0}")]
    Refused(String),
}

fn normal(raw: &RawConfig) -> Value {
    normal_form(&serde_json::to_value(raw).expect("a RawConfig always serialises"))
}

/// The desired config for `machine` following `template`, from the `applied` config.
pub fn desired(
    applied: &Value,
    template: Option<&MachineConfigurationTemplate>,
    machine: &Machine,
) -> Result<Desired, DriftError> {
    let applied =
        crate::validate::load_value(applied.clone()).map_err(|p| DriftError::Applied(p.to_string()))?;
    let wanted = effective_agent_config(applied.clone(), template, machine);
    let change = classify(&normal(&applied), &normal(&wanted));
    if change != Change::Same {
        crate::validate::validate(&wanted)
            .map_err(|p| DriftError::Invalid(p.to_string().replace('\n', "; ")))?;
        let arch = crate::artifact::source::host_arch().map_err(|e| DriftError::Invalid(e.to_string()))?;
        super::source_policy::check(&applied, &wanted, arch).map_err(DriftError::Refused)?;
    }
    Ok(Desired {
        json: normal(&wanted),
        change,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machina::{AgentSpec, KubernetesSpec, LocalDnsSpec, MachineSpec};
    use serde_json::json;

    fn applied() -> Value {
        let mut v = crate::validate::tests::base();
        v["MachineName"] = json!("m1");
        v["Kubelet"]["Labels"] = json!({"pool": "edge"});
        v
    }

    fn machine(spec: MachineSpec) -> Machine {
        Machine::new("m1", spec)
    }

    #[test]
    fn a_machine_that_asks_for_nothing_new_is_no_drift() {
        let d = desired(&applied(), None, &machine(MachineSpec::default())).unwrap();
        assert_eq!(d.change, Change::Same);
        // Formatting and field order of the applied file do not count.
        let reordered: Value =
            serde_json::from_str(&serde_json::to_string_pretty(&applied()).unwrap()).unwrap();
        assert_eq!(
            desired(&reordered, None, &machine(MachineSpec::default()))
                .unwrap()
                .change,
            Change::Same
        );
    }

    #[test]
    fn localdns_turned_off_by_the_machine_is_applied_in_place() {
        let spec = MachineSpec {
            agent: Some(AgentSpec {
                local_dns: Some(LocalDnsSpec {
                    enabled: Some(false),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let d = desired(&applied(), None, &machine(spec)).unwrap();
        assert_eq!(
            d.change,
            Change::InPlace {
                fields: vec!["LocalDNS".into()]
            }
        );
        assert_eq!(d.json["LocalDNS"]["Enabled"], false);
    }

    #[test]
    fn new_labels_need_a_repave() {
        let spec = MachineSpec {
            kubernetes: Some(KubernetesSpec {
                node_labels: [("zone".to_string(), "b".to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let d = desired(&applied(), None, &machine(spec)).unwrap();
        assert!(
            matches!(&d.change, Change::NeedsRepave { fields } if fields == &["Kubelet"]),
            "{d:?}"
        );
        assert_eq!(d.json["Kubelet"]["Labels"]["zone"], "b");
    }

    /// A Machine pointing CoreDNS at another server is refused before anything is fetched
    /// (`source_policy`).
    #[test]
    fn a_machine_moving_a_download_unpinned_is_refused_naming_the_pin() {
        let spec = MachineSpec {
            agent: Some(AgentSpec {
                downloads: Some(crate::machina::agent_spec::AgentDownloadsSpec {
                    core_dns: Some(crate::machina::agent_spec::DownloadSourceSpec {
                        base_url: Some("https://elsewhere.example/coredns".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = desired(&applied(), None, &machine(spec)).unwrap_err();
        assert!(matches!(err, DriftError::Refused(_)), "{err}");
        assert!(
            err.to_string().contains("Downloads.CoreDNS.SHA256.coredns"),
            "{err}"
        );
    }

    #[test]
    fn a_desired_config_the_agent_would_refuse_is_an_error_naming_the_field() {
        let spec = MachineSpec {
            kubernetes: Some(KubernetesSpec {
                register_with_taints: vec!["no-effect".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = desired(&applied(), None, &machine(spec)).unwrap_err().to_string();
        assert!(err.contains("Kubelet.RegisterWithTaints"), "{err}");
    }
}
