//! The kubelet configuration (`/var/lib/kubelet/config.yaml`): `Kubelet.Configuration`
//! with LocalDNS's `clusterDNS` and `resolvConf` overriding what the user wrote.

use serde_json::{Map, Value};

use super::HEADER;
use crate::goal::KubeletGoal;

pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub const KIND: &str = "KubeletConfiguration";

/// The KubeletConfiguration as a JSON object (keys in sorted order).
pub fn configuration(k: &KubeletGoal) -> Map<String, Value> {
    let mut map = k.configuration.clone();
    map.insert("apiVersion".into(), API_VERSION.into());
    map.insert("kind".into(), KIND.into());
    map.insert(
        "clusterDNS".into(),
        k.cluster_dns
            .iter()
            .map(|ip| Value::from(ip.to_string()))
            .collect(),
    );
    if let Some(r) = &k.resolv_conf {
        map.insert("resolvConf".into(), r.clone().into());
    }
    map
}

/// The YAML file: `apiVersion` and `kind` first, then the other keys sorted.
pub fn config_yaml(k: &KubeletGoal) -> Result<String, serde_yaml_ng::Error> {
    let mut map = configuration(k);
    map.remove("apiVersion");
    map.remove("kind");
    let sorted: std::collections::BTreeMap<String, Value> = map.into_iter().collect();
    let rest = serde_yaml_ng::to_string(&sorted)?;
    Ok(format!("{HEADER}apiVersion: {API_VERSION}\nkind: {KIND}\n{rest}"))
}
