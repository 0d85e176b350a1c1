//! Files on the host: the network unit, the nspawn drop-in and the nft script (docs/design.md §6).

use std::net::Ipv4Addr;

use super::HEADER;
use super::paths::{NETWORK_UNIT_NAME, UPSTREAMS_SERVICE_NAME, applied_config};
use super::unit_value::exec_word;
use crate::corefile::{DNS_PORT, READY_PORT};
use crate::goal::{Goal, LocalDnsGoal};

/// The nft table's family and name, and the comment on every rule.
pub const NFT_FAMILY: &str = "ip";
pub const NFT_TABLE: &str = "unbounded_localdns";
pub const NFT_COMMENT: &str = "unbounded-localdns: skip conntrack";

/// `unbounded-localdns-network.service`: recreates the link and the rules at
/// boot, after Debian's `nftables.service` (which flushes the ruleset) and
/// before the machine starts.
pub fn network_unit(goal: &Goal) -> String {
    let slot = goal.slot;
    format!(
        "{HEADER}[Unit]
Description=LocalDNS host network (link localdns, nft table ip unbounded_localdns) for {slot}
After=nftables.service
Before=systemd-nspawn@{slot}.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={agent} localdns network apply --config {config}
ExecStartPost=-{agent} localdns upstreams refresh

[Install]
WantedBy=multi-user.target
",
        agent = exec_word(&format!("{}/bin/unbounded-agent", goal.host_prefix)),
        config = exec_word(&applied_config(slot)),
    )
}

/// `unbounded-localdns-upstreams.path`: the host's resolver files changed (a new DHCP lease, an
/// edit, systemd-resolved's servers) → [`upstreams_service`].
pub fn upstreams_path_unit() -> String {
    format!(
        "{HEADER}[Unit]
Description=LocalDNS: take the host's resolvers when they change

[Path]
PathChanged=/etc/resolv.conf
PathChanged=/run/systemd/resolve/resolv.conf
Unit={UPSTREAMS_SERVICE_NAME}

[Install]
WantedBy=paths.target
"
    )
}

/// `unbounded-localdns-upstreams.service`: the upstreams discovered again and, when they changed,
/// written into the active machine and `localdns.service` reloaded (`localdns upstreams refresh
/// --reload`). Tried again after 15 s when it fails (another agent holds the host lock, the
/// resolver names no usable server yet).
pub fn upstreams_service(goal: &Goal) -> String {
    format!(
        "{HEADER}[Unit]
Description=LocalDNS: the node listener's upstreams from the host's resolvers

[Service]
Type=oneshot
ExecStart={agent} localdns upstreams refresh --reload
Restart=on-failure
RestartSec=15
",
        agent = exec_word(&format!("{}/bin/unbounded-agent", goal.host_prefix)),
    )
}

/// `systemd-nspawn@<slot>.service.d/10-localdns.conf`: the machine needs the network unit.
pub fn nspawn_drop_in() -> String {
    format!("{HEADER}[Unit]\nRequires={NETWORK_UNIT_NAME}\nAfter={NETWORK_UNIT_NAME}\n")
}

/// One NOTRACK rule of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotrackRule {
    /// `prerouting` or `output`.
    pub chain: &'static str,
    /// `daddr`+`dport` for requests, `saddr`+`sport` for replies.
    pub reply: bool,
    pub listener: Ipv4Addr,
    /// `tcp` or `udp`.
    pub protocol: &'static str,
    /// 53 for DNS; [`READY_PORT`] for the supervisor's `/ready` probes.
    pub port: u16,
}

impl NotrackRule {
    /// The rule as nft writes it, e.g.
    /// `ip daddr 169.254.10.10 tcp dport 53 notrack comment "unbounded-localdns: skip conntrack"`.
    pub fn text(&self) -> String {
        let (addr, port) = if self.reply {
            ("saddr", "sport")
        } else {
            ("daddr", "dport")
        };
        format!(
            "ip {addr} {} {} {port} {} notrack comment \"{NFT_COMMENT}\"",
            self.listener, self.protocol, self.port
        )
    }
}

/// Every rule, in script order: per chain × listener × {tcp, udp} the DNS
/// request rules (8), then with `NOTRACKReplies` the DNS reply rules in
/// `output` (4), then in `output` per listener the `/ready` probe's request and
/// reply (4, always: that traffic is the supervisor's own, never a pod's).
pub fn notrack_rules(g: &LocalDnsGoal) -> Vec<NotrackRule> {
    notrack_rules_for(
        [g.node_listener.addr(), g.cluster_listener.addr()],
        g.notrack_replies,
    )
}

/// [`notrack_rules`] from the only inputs it depends on: the listeners (node
/// first) and `NOTRACKReplies`.
pub fn notrack_rules_for(listeners: [Ipv4Addr; 2], notrack_replies: bool) -> Vec<NotrackRule> {
    let mut rules = Vec::new();
    for chain in ["prerouting", "output"] {
        // Requests in both chains; replies leave through `output` only.
        let directions: &[bool] = if chain == "output" && notrack_replies {
            &[false, true]
        } else {
            &[false]
        };
        for &reply in directions {
            for listener in listeners {
                for protocol in ["tcp", "udp"] {
                    rules.push(NotrackRule {
                        chain,
                        reply,
                        listener,
                        protocol,
                        port: DNS_PORT,
                    });
                }
            }
        }
    }
    // The supervisor probes `/ready` on each listener from the node itself (`output` only), both
    // directions leave the node through `output`.
    for listener in listeners {
        for reply in [false, true] {
            rules.push(NotrackRule {
                chain: "output",
                reply,
                listener,
                protocol: "tcp",
                port: READY_PORT,
            });
        }
    }
    rules
}

/// `/etc/unbounded/localdns/localdns.nft`: one `nft -f` transaction that
/// declares the table (so the delete cannot fail on a fresh host), deletes
/// it, and defines it whole — applying it replaces the table atomically.
pub fn nft_script(g: &LocalDnsGoal) -> String {
    nft_script_for(
        [g.node_listener.addr(), g.cluster_listener.addr()],
        g.notrack_replies,
    )
}

/// [`nft_script`] from the only inputs it depends on (no host discovery needed):
/// the listeners (node first) and `NOTRACKReplies`.
pub fn nft_script_for(listeners: [Ipv4Addr; 2], notrack_replies: bool) -> String {
    let rules = notrack_rules_for(listeners, notrack_replies);
    let mut out = format!(
        "#!/usr/sbin/nft -f\n{HEADER}table {NFT_FAMILY} {NFT_TABLE}\ndelete table {NFT_FAMILY} {NFT_TABLE}\n\n\
         table {NFT_FAMILY} {NFT_TABLE} {{\n"
    );
    for (i, chain) in ["prerouting", "output"].into_iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!(
            "\tchain {chain} {{\n\t\ttype filter hook {chain} priority raw; policy accept;\n"
        ));
        for r in rules.iter().filter(|r| r.chain == chain) {
            out.push_str(&format!("\t\t{}\n", r.text()));
        }
        out.push_str("\t}\n");
    }
    out.push_str("}\n");
    out
}
