//! What docs/design.md §6 says the host (a lab VM) holds for LocalDNS, read from the VM as it is: the
//! `localdns` link (`ip -j -d addr show`), the nft table (`nft -j list ...`), units and drop-ins
//! (`systemctl show`), the conntrack table (`conntrack -L`), and the check that none of it — nor
//! the machine's LocalDNS units and files — exists with LocalDNS off. Everything here is parsed
//! from the tools' own output; nothing is taken from the agent's renderer, so scenarios can hold
//! the agent to the design rather than to itself. Only where things live comes from the agent:
//! its one list of on-disk paths ([`agent::paths`], docs/agent.md "Where each file lands").

//!
//! One module per thing read: [`link`], [`nft`], [`units`] (and paths), [`conntrack`], and
//! [`localdns_off`] (the check that none of LocalDNS exists), [`localdns_on`] (the check that it
//! is all there). Their items are re-exported here.

pub mod conntrack;
pub mod link;
pub mod localdns_off;
pub mod localdns_on;
pub mod nft;
pub mod units;

pub use conntrack::*;
pub use link::*;
pub use localdns_off::*;
pub use localdns_on::*;
pub use nft::*;
pub use units::*;

/// The dummy link holding the listener addresses.
pub const LINK: &str = "localdns";
/// The nft table's family and name.
pub const NFT_FAMILY: &str = "ip";
pub const NFT_TABLE: &str = "unbounded_localdns";
/// The comment on every NOTRACK rule.
pub const RULE_COMMENT: &str = "unbounded-localdns: skip conntrack";
/// The oneshot unit recreating link and table at boot, and its file; the host directory holding
/// the nft script.
pub use agent::paths::{
    HOST_LOCALDNS_DIR, NETWORK_UNIT as NETWORK_UNIT_FILE, NETWORK_UNIT_NAME as NETWORK_UNIT,
};
/// The machine's LocalDNS units.
pub const MACHINE_UNITS: [&str; 4] = [
    "localdns.service",
    "localdns-bridge.service",
    "localdns-spare.service",
    "localdns.slice",
];

/// The machine `kube1` or `kube2` as the agent's slot.
pub fn slot(machine: &str) -> agent::names::Slot {
    machine
        .parse()
        .unwrap_or_else(|e| panic!("machine {machine:?} is not a slot of the agent: {e}"))
}

/// The nspawn drop-in that makes the machine require the network unit.
pub fn nspawn_drop_in(machine: &str) -> String {
    agent::paths::nspawn_drop_in(slot(machine))
}

/// The machine's LocalDNS files, as paths on the host (under `/var/lib/machines/<m>`).
pub fn machine_files(machine: &str) -> Vec<String> {
    use agent::paths::*;
    [
        LOCALDNS_SERVICE,
        LOCALDNS_SLICE,
        LOCALDNS_BRIDGE_SERVICE,
        LOCALDNS_SPARE_SERVICE,
        LOCALDNS_SERVICE_WANTS_LINK,
        CONTAINERD_DROP_IN,
        KUBELET_DROP_IN,
        LOCALDNS_DIR,
        COREDNS_BINARY,
        COREDNS_INSTALL_RECORD,
        SUPERVISOR_BINARY,
    ]
    .iter()
    .map(|p| in_machine(slot(machine), p))
    .collect()
}
