//! With LocalDNS on, its host state is there and the machine resolves through it.

use anyhow::{Context, ensure};
use harness::vm::Vm;

use super::*;
use crate::dns::{CLUSTER_LISTENER, NODE_LISTENER, ResolvConf, machine_resolv_conf};

/// The link (a dummy, up, with exactly the two listener /32s), the NOTRACK table, the network
/// unit active, and `machine` resolving through the node listener.
pub fn ensure_localdns_present(vm: &Vm, machine: &str) -> anyhow::Result<()> {
    let link = read_link(vm, LINK)?.context("the localdns link is missing")?;
    let want: std::collections::BTreeSet<String> = [NODE_LISTENER, CLUSTER_LISTENER]
        .iter()
        .map(|ip| format!("{ip}/32"))
        .collect();
    ensure!(
        link.kind.as_deref() == Some("dummy") && link.is_up() && link.ipv4 == want,
        "the localdns link is not a dummy, up, with exactly {want:?}: {link:?}"
    );
    let tables = read_nft_tables(vm)?;
    ensure!(
        tables.contains(&format!("{NFT_FAMILY} {NFT_TABLE}")),
        "the NOTRACK table is missing: {tables:?}"
    );
    let unit = unit_properties(vm, None, NETWORK_UNIT, &["ActiveState"])?;
    ensure!(
        unit.get("ActiveState").map(String::as_str) == Some("active"),
        "{NETWORK_UNIT} is not active: {unit:?}"
    );
    let resolv = ResolvConf::parse(&machine_resolv_conf(vm, machine)?);
    ensure!(
        resolv.nameservers() == [NODE_LISTENER.to_string()],
        "the machine's resolver is not the node listener: {:?}",
        resolv.lines()
    );
    Ok(())
}
