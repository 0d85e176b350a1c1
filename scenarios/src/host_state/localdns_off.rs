//! With LocalDNS off, none of its host state nor the machine's units and files exist.

use anyhow::ensure;
use harness::vm::Vm;

use super::*;
use crate::dns::{CLUSTER_LISTENER, NODE_LISTENER, ResolvConf, machine_resolv_conf};

/// With LocalDNS off, none of its host state (link, nft table, network unit, nspawn drop-in,
/// `/etc/unbounded/localdns`) nor the machine's units and files exist. Each read is first shown
/// to see real things (the `lo` link, the machine's nspawn unit and kubelet, its unit directory),
/// so an absence cannot come from looking in the wrong place. The error lists every leftover.
pub fn ensure_localdns_absent(vm: &Vm, machine: &str) -> anyhow::Result<()> {
    // Controls: the same reads find what does exist.
    ensure!(
        read_link(vm, "lo")?.is_some(),
        "reading links with `ip -j -d addr show` did not even find `lo`"
    );
    let nspawn = format!("systemd-nspawn@{machine}.service");
    ensure!(
        unit_found(vm, None, &nspawn)?.is_some(),
        "the unit reader does not find host unit {nspawn}"
    );
    ensure!(
        unit_found(vm, Some(machine), "kubelet.service")?.is_some(),
        "the unit reader does not find kubelet.service in {machine}"
    );
    let unit_dir = format!("/var/lib/machines/{machine}/etc/systemd/system");
    ensure!(
        existing_paths(vm, std::slice::from_ref(&unit_dir))? == [unit_dir.clone()],
        "the machine's unit directory {unit_dir} does not exist"
    );

    let mut leftovers = Vec::new();
    if let Some(link) = read_link(vm, LINK)? {
        leftovers.push(format!("link {LINK}: {link:?}"));
    }
    let tables = read_nft_tables(vm)?;
    if tables.contains(&format!("{NFT_FAMILY} {NFT_TABLE}")) {
        leftovers.push(format!("nft table {NFT_FAMILY} {NFT_TABLE} (tables: {tables:?})"));
    }
    for unit in [
        NETWORK_UNIT,
        agent::paths::UPSTREAMS_PATH_UNIT_NAME,
        agent::paths::UPSTREAMS_SERVICE_NAME,
    ] {
        if let Some(found) = unit_found(vm, None, unit)? {
            leftovers.push(format!("host unit {unit} ({found})"));
        }
    }
    for unit in MACHINE_UNITS {
        if let Some(found) = unit_found(vm, Some(machine), unit)? {
            leftovers.push(format!("unit {unit} in {machine} ({found})"));
        }
    }
    let mut paths = vec![
        NETWORK_UNIT_FILE.to_string(),
        format!("/etc/systemd/system/multi-user.target.wants/{NETWORK_UNIT}"),
        agent::paths::UPSTREAMS_PATH_UNIT.to_string(),
        agent::paths::UPSTREAMS_PATH_WANTS_LINK.to_string(),
        agent::paths::UPSTREAMS_SERVICE.to_string(),
        nspawn_drop_in(machine),
        HOST_LOCALDNS_DIR.to_string(),
    ];
    paths.extend(machine_files(machine));
    leftovers.extend(
        existing_paths(vm, &paths)?
            .into_iter()
            .map(|p| format!("file {p}")),
    );
    // The machine's resolver is not a listener (nspawn gives it the host's).
    let resolver = ResolvConf::parse(&machine_resolv_conf(vm, machine)?);
    ensure!(
        !resolver.nameservers().is_empty(),
        "/etc/resolv.conf in {machine} names no nameserver at all: {resolver:?}"
    );
    for listener in [NODE_LISTENER, CLUSTER_LISTENER] {
        if resolver.nameservers().contains(&listener.to_string()) {
            leftovers.push(format!(
                "/etc/resolv.conf in {machine} names the listener {listener}: {resolver:?}"
            ));
        }
    }
    ensure!(
        leftovers.is_empty(),
        "with LocalDNS off these LocalDNS things exist:\n  {}",
        leftovers.join("\n  ")
    );
    eprintln!("==> LocalDNS off: no LocalDNS link, nft table, units or files on the host or in {machine}");
    Ok(())
}
