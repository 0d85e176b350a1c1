//! The host network's inputs from a checked config: the [`NetworkSpec`] and the rendered nft script.

use crate::goal::LocalDnsGoal;
use crate::names::MetricsAddress;
use crate::render::host;
use crate::validate::{Config, LocalDns};

use super::NetworkSpec;

impl NetworkSpec {
    /// The host network part of an enabled `LocalDNS` section.
    pub fn from_config(l: &LocalDns) -> Self {
        NetworkSpec {
            node_listener: l.node_listener.addr(),
            cluster_listener: l.cluster_listener.addr(),
            notrack_replies: l.notrack_replies,
        }
    }
}

/// The rendered `localdns.nft` for this config (`render::host::nft_script`). The script depends only
/// on the listeners and `NOTRACKReplies`, so the goal is built without host discovery (upstreams,
/// metrics address): the boot-time unit must not fail because a resolver is not up yet.
pub fn nft_script(config: &Config, l: &LocalDns) -> String {
    let goal = LocalDnsGoal {
        node_listener: l.node_listener,
        cluster_listener: l.cluster_listener,
        cluster_dns: config.cluster.cluster_dns,
        upstreams: Vec::new(),
        metrics_address: l.metrics_address.unwrap_or_else(|| {
            MetricsAddress::new(l.node_listener, MetricsAddress::DEFAULT_PORT)
                .expect("a listener is a unicast address")
        }),
        cpu_limit_millicores: l.cpu_limit_millicores,
        memory_limit_mb: l.memory_limit_mb,
        coredns_version: crate::artifact::source::COREDNS_DEFAULT_VERSION
            .parse()
            .expect("the default CoreDNS version is valid"),
        required_plugins: l.required_plugins.clone(),
        corefile_template: None,
        notrack_replies: l.notrack_replies,
        node_zones: l.node_zones.clone(),
        cluster_zones: l.cluster_zones.clone(),
        resolv_conf_lines: Vec::new(),
    };
    host::nft_script(&goal)
}
