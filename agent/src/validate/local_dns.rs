//! Validation of the `LocalDNS` section (docs/design.md §2).

use std::collections::BTreeSet;

use super::checked::{
    DEFAULT_CLUSTER_LISTENER, DEFAULT_CPU_LIMIT_MILLICORES, DEFAULT_MEMORY_LIMIT_MB, DEFAULT_NODE_LISTENER,
    LocalDns, MAX_COREFILE_TEMPLATE_BYTES,
};
use super::problems::Problems;
use crate::config::LocalDnsConfig;
use crate::names::{MetricsAddress, PluginName, UnicastIpv4};
use crate::zones::Listener;

const P: &str = "LocalDNS";

/// Checks an enabled `LocalDNS` section. `cluster_dns` is `Cluster.ClusterDNS`
/// when it was valid, so the listeners can be compared with it.
pub fn check(
    raw: &LocalDnsConfig,
    cluster_dns: Option<UnicastIpv4>,
    problems: &mut Problems,
) -> Option<LocalDns> {
    let before = problems.0.len();
    let node = listener(
        raw.node_listener_ip.as_deref(),
        DEFAULT_NODE_LISTENER,
        "NodeListenerIP",
        problems,
    );
    let cluster = listener(
        raw.cluster_listener_ip.as_deref(),
        DEFAULT_CLUSTER_LISTENER,
        "ClusterListenerIP",
        problems,
    );
    if let (Some(n), Some(c)) = (node, cluster)
        && n == c
    {
        problems.push(
            format!("{P}.ClusterListenerIP"),
            format!("{c} must differ from LocalDNS.NodeListenerIP"),
        );
    }
    if let Some(dns) = cluster_dns {
        for (ip, name) in [(node, "NodeListenerIP"), (cluster, "ClusterListenerIP")] {
            if ip == Some(dns) {
                problems.push(
                    "Cluster.ClusterDNS",
                    format!("{dns} must differ from LocalDNS.{name}"),
                );
            }
        }
    }

    let metrics_address = match raw.metrics_address.as_deref() {
        None => None,
        Some(s) => match s.parse::<MetricsAddress>() {
            Ok(m) => Some(m),
            Err(e) => {
                problems.push(format!("{P}.MetricsAddress"), e.to_string());
                None
            }
        },
    };

    let cpu = positive(
        raw.cpu_limit_in_milli_cores,
        DEFAULT_CPU_LIMIT_MILLICORES,
        "CPULimitInMilliCores",
        problems,
    );
    let mem = positive(
        raw.memory_limit_in_mb,
        DEFAULT_MEMORY_LIMIT_MB,
        "MemoryLimitInMB",
        problems,
    );
    let required_plugins = plugins(raw.required_plugins.as_deref().unwrap_or_default(), problems);

    let node_zones = super::zones::check(raw.node_listener_overrides.as_ref(), Listener::Node, problems);
    let cluster_zones = super::zones::check(
        raw.cluster_listener_overrides.as_ref(),
        Listener::Cluster,
        problems,
    );

    if let Some(t) = &raw.corefile_template {
        // A template of its own must render the zones, or their settings would do nothing.
        for (overrides, listener, variable) in [
            (&raw.node_listener_overrides, Listener::Node, "node_zones"),
            (
                &raw.cluster_listener_overrides,
                Listener::Cluster,
                "cluster_zones",
            ),
        ] {
            if overrides.as_ref().is_some_and(|o| !o.is_empty()) && !t.contains(variable) {
                problems.push(
                    format!("{P}.{}", listener.field()),
                    format!("has no effect: LocalDNS.CorefileTemplate never uses `{variable}`"),
                );
            }
        }
        let path = format!("{P}.CorefileTemplate");
        if t.len() > MAX_COREFILE_TEMPLATE_BYTES {
            problems.push(
                path,
                format!(
                    "is {} bytes; at most {MAX_COREFILE_TEMPLATE_BYTES} (64 KiB)",
                    t.len()
                ),
            );
        } else if t.trim().is_empty() {
            problems.push(path, "is empty; leave it out to use the built-in template");
        } else {
            let checked = match (&node_zones, &cluster_zones) {
                (Some(node), Some(cluster)) => crate::corefile::check_template_with_zones(t, node, cluster),
                _ => crate::corefile::check_template(t),
            };
            if let Err(e) = checked {
                problems.push(path, e.to_string());
            }
        }
    }

    if problems.0.len() > before {
        return None;
    }
    Some(LocalDns {
        node_listener: node?,
        cluster_listener: cluster?,
        metrics_address,
        cpu_limit_millicores: cpu?,
        memory_limit_mb: mem?,
        required_plugins,
        corefile_template: raw.corefile_template.clone(),
        notrack_replies: raw.notrack_replies.unwrap_or(true),
        node_zones: node_zones?,
        cluster_zones: cluster_zones?,
    })
}

fn listener(
    raw: Option<&str>,
    default: std::net::Ipv4Addr,
    name: &str,
    problems: &mut Problems,
) -> Option<UnicastIpv4> {
    let parsed = match raw {
        None => UnicastIpv4::try_from(default),
        Some(s) => s.parse(),
    };
    parsed
        .map_err(|e| problems.push(format!("{P}.{name}"), e.to_string()))
        .ok()
}

fn positive(raw: Option<i64>, default: u32, name: &str, problems: &mut Problems) -> Option<u32> {
    match raw {
        None => Some(default),
        Some(v) if v > 0 && v <= i64::from(u32::MAX) => Some(v as u32),
        Some(v) if v > 0 => {
            problems.push(
                format!("{P}.{name}"),
                format!("{v} is too large (at most {})", u32::MAX),
            );
            None
        }
        Some(v) => {
            problems.push(format!("{P}.{name}"), format!("{v} must be greater than 0"));
            None
        }
    }
}

fn plugins(raw: &[String], problems: &mut Problems) -> Vec<PluginName> {
    let mut seen = BTreeSet::new();
    for (i, name) in raw.iter().enumerate() {
        let path = format!("{P}.RequiredPlugins[{i}]");
        match PluginName::normalise(name) {
            Ok(p) => {
                if !seen.insert(p.clone()) {
                    problems.push(path, format!("{:?} is listed more than once", p.as_str()));
                }
            }
            Err(e) => problems.push(path, e.to_string()),
        }
    }
    for base in PluginName::BASELINE {
        seen.insert(PluginName::normalise(base).expect("baseline plugin names are valid"));
    }
    seen.into_iter().collect()
}
