//! Where each LocalDNS file lives: machine paths are inside the machine
//! (prefix them with `/var/lib/machines/<slot>` on the host), host paths are on the host.

use crate::names::Slot;

// Inside the machine.
pub const LOCALDNS_DIR: &str = "/etc/unbounded/localdns";
pub const COREFILE: &str = "/etc/unbounded/localdns/Corefile";
pub const LOCALDNS_RESOLV_CONF: &str = crate::goal::LOCALDNS_RESOLV_CONF;
pub const NODE_UPSTREAMS: &str = "/etc/unbounded/localdns/node-upstreams";
pub const ENVIRONMENT: &str = "/etc/unbounded/localdns/environment";
pub const MACHINE_RESOLV_CONF: &str = "/etc/resolv.conf";
pub const COREDNS_BINARY: &str = "/usr/local/bin/coredns";
pub const SUPERVISOR_BINARY: &str = "/usr/local/libexec/unbounded-localdns-supervisor";
pub const LOCALDNS_SERVICE: &str = "/etc/systemd/system/localdns.service";
pub const LOCALDNS_SLICE: &str = "/etc/systemd/system/localdns.slice";
pub const LOCALDNS_SERVICE_WANTS_LINK: &str = "/etc/systemd/system/multi-user.target.wants/localdns.service";
pub const RESOLVED_MASK_LINK: &str = "/etc/systemd/system/systemd-resolved.service";
pub const CONTAINERD_DROP_IN: &str = "/etc/systemd/system/containerd.service.d/05-localdns.conf";
pub const KUBELET_DROP_IN: &str = "/etc/systemd/system/kubelet.service.d/05-localdns.conf";
pub const KUBELET_CONFIG: &str = "/var/lib/kubelet/config.yaml";

// On the host.
pub const NETWORK_UNIT_NAME: &str = "unbounded-localdns-network.service";
pub const NETWORK_UNIT: &str = "/etc/systemd/system/unbounded-localdns-network.service";
pub const NETWORK_UNIT_WANTS_LINK: &str =
    "/etc/systemd/system/multi-user.target.wants/unbounded-localdns-network.service";
pub const NFT_SCRIPT: &str = "/etc/unbounded/localdns/localdns.nft";

/// `/etc/systemd/system/systemd-nspawn@<slot>.service.d/10-localdns.conf`.
pub fn nspawn_drop_in(slot: Slot) -> String {
    format!("/etc/systemd/system/systemd-nspawn@{slot}.service.d/10-localdns.conf")
}

/// `/etc/unbounded/agent/<slot>-applied-config.json`, the config the network unit applies.
pub fn applied_config(slot: Slot) -> String {
    format!("/etc/unbounded/agent/{slot}-applied-config.json")
}

/// The `.nspawn` setting LocalDNS needs (section, line): with a shared host
/// network nspawn's default `ResolvConf=auto` would overwrite the machine's
/// resolver at every start. `.nspawn` files have no drop-ins, so whoever
/// writes `/etc/systemd/nspawn/<slot>.nspawn` includes this line.
pub const NSPAWN_RESOLV_CONF: (&str, &str) = ("Exec", "ResolvConf=off");
