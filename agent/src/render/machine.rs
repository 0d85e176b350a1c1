//! Plain files in the machine rootfs: both resolv.conf files, `node-upstreams`, `environment`.

use super::HEADER;
use super::paths::{COREDNS_BINARY, COREFILE, FALLBACK_COREFILE};
use crate::corefile::{COREDNS_METRICS_ADDRESS, HEALTH_NAME, READY_PORT};
use crate::goal::LocalDnsGoal;

/// The machine's `/etc/resolv.conf` and `/etc/unbounded/localdns/resolv.conf`:
/// the host's `search`/`domain`/`options` lines, then the node listener. The
/// machine resolver never points at the cluster listener (a bootstrap cycle).
pub fn resolv_conf(g: &LocalDnsGoal) -> String {
    let mut out = String::from(HEADER);
    for line in &g.resolv_conf_lines {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&format!("nameserver {}\n", g.node_listener));
    out
}

/// `node-upstreams`: one upstream IP a line and nothing else (no header, so
/// that a reader can take every line as an address).
pub fn node_upstreams(g: &LocalDnsGoal) -> String {
    g.upstreams.iter().map(|ip| format!("{ip}\n")).collect()
}

/// The supervisor's settings, read by systemd's `EnvironmentFile=`.
pub fn environment(g: &LocalDnsGoal) -> String {
    format!(
        "{HEADER}LOCALDNS_NODE_LISTENER={}\nLOCALDNS_CLUSTER_LISTENER={}\nLOCALDNS_COREFILE={COREFILE}\nLOCALDNS_FALLBACK_COREFILE={FALLBACK_COREFILE}\n\
         LOCALDNS_COREDNS={COREDNS_BINARY}\nLOCALDNS_HEALTH_NAME={HEALTH_NAME}\nLOCALDNS_READY_PORT={READY_PORT}\n\
         LOCALDNS_METRICS_ADDRESS={}\nLOCALDNS_COREDNS_METRICS_ADDRESS={COREDNS_METRICS_ADDRESS}\n",
        g.node_listener, g.cluster_listener, g.metrics_address
    )
}
