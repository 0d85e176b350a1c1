//! Cutting VMs off from the lab's artifact server (for the offline scenarios): one nft table
//! `inet lab_offline` in the lab's namespace rejects TCP to `:8080` from the blocked VMs with
//! ICMP host-unreachable, so a connect in the VM fails with "No route to host", while the
//! upstream DNS (`:53`) on the same bridge address and the API server on the Kind node
//! (`192.168.100.3:6443`) stay reachable.
//!
//! The table is rewritten whole from the set of blocked addresses each time (replace, never
//! append), so blocking or unblocking twice changes nothing; with no address left the table is
//! deleted. It lives in the lab's namespace and goes with it at teardown.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::Path;

use agent::exec;

use super::error::{LabError, io_err};
use crate::netns;

/// The nft table (family `inet`) holding the block.
pub const TABLE: &str = "lab_offline";

/// The nft script that makes the table say exactly `blocked` (deletes it when empty).
pub fn script(blocked: &BTreeSet<Ipv4Addr>, port: u16) -> String {
    // Declaring the table first makes the delete succeed whether or not it existed.
    let mut text = format!("table inet {TABLE}\ndelete table inet {TABLE}\n");
    if blocked.is_empty() {
        return text;
    }
    let addrs: Vec<String> = blocked.iter().map(Ipv4Addr::to_string).collect();
    text += &format!(
        "table inet {TABLE} {{\n\
         \tchain input {{\n\
         \t\ttype filter hook input priority filter; policy accept;\n\
         \t\tip saddr {{ {} }} tcp dport {port} counter reject with icmp type host-unreachable\n\
         \t}}\n\
         }}\n",
        addrs.join(", ")
    );
    text
}

/// Applies [`script`] in namespace `netns_name` (the script is kept at `script_path`).
pub fn apply(
    netns_name: &str,
    script_path: &Path,
    blocked: &BTreeSet<Ipv4Addr>,
    port: u16,
) -> Result<(), LabError> {
    std::fs::write(script_path, script(blocked, port)).map_err(io_err("writing", script_path))?;
    exec::run(netns::command_in(netns_name, "nft").arg("-f").arg(script_path))?;
    Ok(())
}

/// The table as nft lists it, with its counter (empty when nothing is blocked).
pub fn list(netns_name: &str) -> Result<String, LabError> {
    let out =
        exec::run_unchecked(netns::command_in(netns_name, "nft").args(["list", "table", "inet", TABLE]))?;
    Ok(if out.status.success() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        String::new()
    })
}

/// The packets the reject rule counted, from [`list`]'s text (`counter packets N bytes M`);
/// `None` when the table or its counter is not there.
pub fn rejected_packets(listing: &str) -> Option<u64> {
    let line = listing.lines().find(|l| l.contains("reject"))?;
    let mut words = line.split_whitespace();
    words.find(|w| *w == "packets")?;
    words.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reject_rules_counter_is_read_from_nfts_listing() {
        let listing = "table inet lab_offline {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t\tip saddr 192.168.101.10 tcp dport 8080 counter packets 3 bytes 180 reject with icmp host-unreachable\n\t}\n}\n";
        assert_eq!(rejected_packets(listing), Some(3));
        assert_eq!(rejected_packets(""), None);
        assert_eq!(
            rejected_packets("\t\tip saddr 1.2.3.4 tcp dport 8080 reject\n"),
            None
        );
    }

    #[test]
    fn blocked_addresses_get_one_reject_rule_for_the_artifact_port_only() {
        let blocked: BTreeSet<Ipv4Addr> = [
            "192.168.101.11".parse().unwrap(),
            "192.168.101.10".parse().unwrap(),
        ]
        .into_iter()
        .collect();
        let text = script(&blocked, 8080);
        assert!(
            text.starts_with("table inet lab_offline\ndelete table inet lab_offline\n"),
            "{text}"
        );
        let rules: Vec<&str> = text.lines().filter(|l| l.contains("reject")).collect();
        assert_eq!(
            rules,
            [
                "\t\tip saddr { 192.168.101.10, 192.168.101.11 } tcp dport 8080 counter reject with icmp type host-unreachable"
            ]
        );
    }

    #[test]
    fn nothing_blocked_deletes_the_table() {
        assert_eq!(
            script(&BTreeSet::new(), 8080),
            "table inet lab_offline\ndelete table inet lab_offline\n"
        );
    }
}
