//! What docs/design.md §6 says the host (a lab VM) holds for LocalDNS, read from the VM as it is: the
//! `localdns` link (`ip -j -d addr show`), the nft table (`nft -j list ...`), units and drop-ins
//! (`systemctl show`), the conntrack table (`conntrack -L`), and the check that none of it — nor
//! the machine's LocalDNS units and files — exists with LocalDNS off. Everything here is parsed
//! from the tools' own output; nothing is taken from the agent's renderer, so scenarios can hold
//! the agent to the design rather than to itself.

//!
//! One module per thing read: [`link`], [`nft`], [`units`] (and paths), [`conntrack`], and
//! [`localdns_off`] (the check that none of LocalDNS exists). Their items are re-exported here.

pub mod conntrack;
pub mod link;
pub mod localdns_off;
pub mod nft;
pub mod units;

pub use conntrack::*;
pub use link::*;
pub use localdns_off::*;
pub use nft::*;
pub use units::*;

/// The dummy link holding the listener addresses.
pub const LINK: &str = "localdns";
/// The nft table's family and name.
pub const NFT_FAMILY: &str = "ip";
pub const NFT_TABLE: &str = "unbounded_localdns";
/// The comment on every NOTRACK rule.
pub const RULE_COMMENT: &str = "unbounded-localdns: skip conntrack";
/// The oneshot unit recreating link and table at boot, and its file.
pub const NETWORK_UNIT: &str = "unbounded-localdns-network.service";
pub const NETWORK_UNIT_FILE: &str = "/etc/systemd/system/unbounded-localdns-network.service";
/// The host directory holding the nft script.
pub const HOST_LOCALDNS_DIR: &str = "/etc/unbounded/localdns";
/// The machine's LocalDNS units.
pub const MACHINE_UNITS: [&str; 2] = ["localdns.service", "localdns.slice"];

/// The nspawn drop-in that makes the machine require the network unit.
pub fn nspawn_drop_in(machine: &str) -> String {
    format!("/etc/systemd/system/systemd-nspawn@{machine}.service.d/10-localdns.conf")
}

/// The machine's LocalDNS files, as paths on the host (under `/var/lib/machines/<m>`).
pub fn machine_files(machine: &str) -> Vec<String> {
    [
        "/etc/systemd/system/localdns.service",
        "/etc/systemd/system/localdns.slice",
        "/etc/systemd/system/multi-user.target.wants/localdns.service",
        "/etc/systemd/system/containerd.service.d/05-localdns.conf",
        "/etc/systemd/system/kubelet.service.d/05-localdns.conf",
        "/etc/unbounded/localdns",
        "/usr/local/bin/coredns",
        "/usr/local/libexec/unbounded-localdns-supervisor",
    ]
    .iter()
    .map(|p| format!("/var/lib/machines/{machine}{p}"))
    .collect()
}
