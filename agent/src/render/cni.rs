//! The pod network inside the machine: a `bridge` + `host-local` CNI conflist over the node's
//! pod CIDR (`/etc/cni/net.d/10-unbounded-bridge.conflist`).

use serde_json::json;

/// The conflist's path in the machine.
pub const CONFLIST: &str = "/etc/cni/net.d/10-unbounded-bridge.conflist";
/// The bridge's name on the host network (the machine shares it).
pub const BRIDGE: &str = "cni0";

/// The conflist: pods on bridge `cni0` with the first address of the pod CIDR as gateway,
/// addresses from host-local, outbound traffic to other networks masqueraded, and portmap.
pub fn bridge_conflist(pod_cidr: &str) -> String {
    let value = json!({
        "cniVersion": "1.0.0",
        "name": "unbounded-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}]
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    let mut text = serde_json::to_string_pretty(&value).expect("a JSON value serialises");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conflist_hands_out_addresses_from_the_pod_cidr() {
        let v: serde_json::Value = serde_json::from_str(&bridge_conflist("10.244.3.0/24")).unwrap();
        assert_eq!(v["plugins"][0]["type"], "bridge");
        assert_eq!(v["plugins"][0]["ipam"]["ranges"][0][0]["subnet"], "10.244.3.0/24");
    }
}
