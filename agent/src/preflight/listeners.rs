//! Preflight check `localdns-listeners`: the listener IPs are not held by another interface than
//! `localdns`, and ports 53 (UDP, TCP) and 8181 (TCP) on them are free; the metrics address is
//! one of this host's and its port (9253 unless set) is free.

use std::net::{Ipv4Addr, SocketAddrV4};

use crate::hostnet::LINK_NAME;
use crate::hostnet::link::Netlink;
use crate::names::MetricsAddress;
pub use crate::sockets::{Bound, bound_sockets};

use super::{Context, Finding, Severity};

pub const NAME: &str = "localdns-listeners";
/// The listeners' DNS port and CoreDNS's `ready` port on each.
pub use crate::corefile::{DNS_PORT, READY_PORT};

pub fn run(ctx: &Context) -> Vec<Finding> {
    let Some(config) = ctx.valid_config() else {
        return Vec::new();
    };
    let Some(l) = &config.local_dns else {
        return vec![Finding::new(
            NAME,
            "listeners",
            Severity::Ok,
            "LocalDNS is disabled",
        )];
    };
    let holders = Netlink::open()
        .and_then(|nl| nl.all_ipv4())
        .map_err(|e| format!("{e}"));
    let bound = bound_sockets();
    let mut findings = check(
        &[l.node_listener.addr(), l.cluster_listener.addr()],
        holders.clone(),
        bound.clone(),
    );
    if let (Ok(holders), Ok(bound)) = (&holders, &bound) {
        findings.push(check_metrics(
            l.metrics_address.map(|m| m.socket_addr()),
            holders,
            bound,
        ));
    }
    findings
}

/// The metrics address: an explicit one must be an address of this host (CoreDNS binds it) and
/// its port free there; a derived one (the node's address, port 9253) must find the port free on
/// every address. On a host whose `localdns` link is up, a bound port is most likely LocalDNS's
/// own CoreDNS: a warning.
pub fn check_metrics(
    explicit: Option<SocketAddrV4>,
    holders: &[(String, Ipv4Addr, u8)],
    bound: &[Bound],
) -> Finding {
    let ours = holders.iter().any(|(link, _, _)| link == LINK_NAME);
    let port = explicit.map_or(MetricsAddress::DEFAULT_PORT, |m| m.port());
    let target = explicit.map_or(format!("metrics <node address>:{port}/tcp"), |m| {
        format!("metrics {m}/tcp")
    });
    if let Some(m) = explicit
        && !holders.iter().any(|(_, ip, _)| ip == m.ip())
    {
        let addresses: Vec<String> = holders
            .iter()
            .filter(|(link, ip, _)| link != LINK_NAME && !ip.is_loopback())
            .map(|(link, ip, _)| format!("{ip} ({link})"))
            .collect();
        return Finding::new(
            NAME,
            target,
            Severity::Error,
            format!(
                "{} is not an address of this host, so CoreDNS cannot serve metrics there: set \
                 LocalDNS.MetricsAddress to one of {} or leave it out (the node's address)",
                m.ip(),
                if addresses.is_empty() {
                    "its addresses".to_string()
                } else {
                    addresses.join(", ")
                }
            ),
        );
    }
    let users: Vec<Ipv4Addr> = bound
        .iter()
        .filter(|b| b.proto == "tcp" && b.port == port)
        .filter(|b| b.ip.is_unspecified() || explicit.is_none_or(|m| b.ip == *m.ip()))
        .map(|b| b.ip)
        .collect();
    match users.first() {
        None => Finding::new(NAME, target, Severity::Ok, "free"),
        Some(_) if ours => Finding::new(
            NAME,
            target,
            Severity::Warning,
            "a socket is already bound there (expected when LocalDNS is already running)",
        ),
        Some(ip) => Finding::new(
            NAME,
            target,
            Severity::Error,
            format!(
                "a socket is already bound on {ip}:{port}: stop what holds it (`ss -ltnp 'sport = :{port}'`) \
                 or set LocalDNS.MetricsAddress to another port"
            ),
        ),
    }
}

/// The findings for these listeners, given every IPv4 address with its link and the bound sockets.
pub fn check(
    listeners: &[Ipv4Addr],
    holders: Result<Vec<(String, Ipv4Addr, u8)>, String>,
    bound: Result<Vec<Bound>, String>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let holders = match holders {
        Ok(h) => h,
        Err(err) => {
            return vec![Finding::new(
                NAME,
                "addresses",
                Severity::Error,
                format!("cannot list addresses: {err}"),
            )];
        }
    };
    let bound = match bound {
        Ok(b) => b,
        Err(err) => return vec![Finding::new(NAME, "sockets", Severity::Error, err)],
    };
    for &ip in listeners {
        let others: Vec<&str> = holders
            .iter()
            .filter(|(link, a, _)| *a == ip && link != LINK_NAME)
            .map(|(l, _, _)| l.as_str())
            .collect();
        let ours = holders.iter().any(|(link, a, _)| *a == ip && link == LINK_NAME);
        if others.is_empty() {
            findings.push(Finding::new(
                NAME,
                ip.to_string(),
                Severity::Ok,
                if ours {
                    format!("held by {LINK_NAME} only")
                } else {
                    "not assigned to any interface".into()
                },
            ));
        } else {
            findings.push(Finding::new(
                NAME,
                ip.to_string(),
                Severity::Error,
                format!(
                    "already assigned to {}; LocalDNS needs it on its own link {LINK_NAME}",
                    others.join(", ")
                ),
            ));
        }
        for (proto, port) in [("udp", DNS_PORT), ("tcp", DNS_PORT), ("tcp", READY_PORT)] {
            let users: Vec<Ipv4Addr> = bound
                .iter()
                .filter(|b| b.proto == proto && b.port == port && (b.ip == ip || b.ip.is_unspecified()))
                .map(|b| b.ip)
                .collect();
            let target = format!("{ip}:{port}/{proto}");
            if users.is_empty() {
                findings.push(Finding::new(NAME, target, Severity::Ok, "free"));
            } else {
                let on = if users.iter().any(|u| u.is_unspecified()) {
                    "0.0.0.0 (all addresses)"
                } else {
                    "it"
                };
                // On our own link, a bound port is most likely LocalDNS's CoreDNS already running.
                let (severity, hint) = if ours && !users.iter().any(|u| u.is_unspecified()) {
                    (Severity::Warning, " (expected when LocalDNS is already running)")
                } else {
                    (Severity::Error, "")
                };
                findings.push(Finding::new(
                    NAME,
                    target,
                    severity,
                    format!("a socket is already bound on {on}{hint}"),
                ));
            }
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 10);
    const CLUSTER: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 11);

    /// What a host could hold: a listener on 127.0.0.1:53 and one on 0.0.0.0:8181.
    fn bound() -> Vec<Bound> {
        vec![
            Bound {
                proto: "tcp",
                ip: Ipv4Addr::LOCALHOST,
                port: 53,
            },
            Bound {
                proto: "tcp",
                ip: Ipv4Addr::UNSPECIFIED,
                port: 8181,
            },
        ]
    }

    fn severities(findings: &[Finding]) -> Vec<(String, Severity)> {
        findings.iter().map(|f| (f.target.clone(), f.severity)).collect()
    }

    #[test]
    fn listener_on_another_interface_is_an_error_naming_it() {
        let holders = vec![("eth0".to_owned(), NODE, 32)];
        let findings = check(&[NODE, CLUSTER], Ok(holders), Ok(vec![]));
        let node = findings.iter().find(|f| f.target == NODE.to_string()).unwrap();
        assert_eq!(node.severity, Severity::Error);
        assert!(node.message.contains("eth0"), "{}", node.message);
        assert!(
            findings
                .iter()
                .filter(|f| f.target != NODE.to_string())
                .all(|f| f.severity == Severity::Ok)
        );
    }

    #[test]
    fn listener_on_localdns_only_is_fine() {
        let holders = vec![
            (LINK_NAME.to_owned(), NODE, 32),
            (LINK_NAME.to_owned(), CLUSTER, 32),
        ];
        let findings = check(&[NODE, CLUSTER], Ok(holders), Ok(vec![]));
        assert!(
            findings.iter().all(|f| f.severity == Severity::Ok),
            "{:?}",
            severities(&findings)
        );
        assert_eq!(findings.len(), 8);
    }

    #[test]
    fn wildcard_socket_on_8181_blocks_both_listeners() {
        let bound = bound();
        let findings = check(&[NODE, CLUSTER], Ok(vec![]), Ok(bound));
        let errors: Vec<_> = findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| f.target.as_str())
            .collect();
        assert_eq!(errors, vec!["169.254.10.10:8181/tcp", "169.254.10.11:8181/tcp"]);
    }

    #[test]
    fn a_metrics_address_not_on_this_host_is_an_error_naming_the_hosts_addresses() {
        let holders = vec![("eth0".to_owned(), Ipv4Addr::new(192, 168, 100, 10), 24)];
        let explicit = Some("10.9.9.9:9253".parse().unwrap());
        let finding = check_metrics(explicit, &holders, &[]);
        assert_eq!(finding.severity, Severity::Error);
        assert!(
            finding.message.contains("192.168.100.10 (eth0)") && finding.message.contains("MetricsAddress"),
            "{}",
            finding.message
        );
        let on_host = check_metrics(Some("192.168.100.10:9253".parse().unwrap()), &holders, &[]);
        assert_eq!(on_host.severity, Severity::Ok, "{}", on_host.message);
    }

    #[test]
    fn a_busy_metrics_port_is_an_error_unless_localdns_runs() {
        let holders = vec![("eth0".to_owned(), Ipv4Addr::new(192, 168, 100, 10), 24)];
        let busy = vec![Bound {
            proto: "tcp",
            ip: Ipv4Addr::UNSPECIFIED,
            port: 9253,
        }];
        let derived = check_metrics(None, &holders, &busy);
        assert_eq!(derived.severity, Severity::Error);
        assert!(derived.message.contains("ss -ltnp"), "{}", derived.message);
        let other_port = check_metrics(Some("192.168.100.10:9300".parse().unwrap()), &holders, &busy);
        assert_eq!(other_port.severity, Severity::Ok);
        let mut running = holders.clone();
        running.push((LINK_NAME.to_owned(), NODE, 32));
        assert_eq!(check_metrics(None, &running, &busy).severity, Severity::Warning);
    }

    #[test]
    fn unreadable_addresses_are_an_error() {
        let findings = check(&[NODE], Err("permission denied".into()), Ok(vec![]));
        assert_eq!(findings[0].severity, Severity::Error);
    }

    #[test]
    fn live_socket_on_a_listener_is_seen_in_a_fresh_network_namespace() {
        // Real kernel state: a new network namespace for this test thread, the node listener on `lo`
        // and a UDP socket bound on it port 53.
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
            .expect("unshare(CLONE_NEWNET) needs root (run the tests as root)");
        crate::exec::run(std::process::Command::new("ip").args([
            "addr",
            "add",
            "169.254.10.10/32",
            "dev",
            "lo",
        ]))
        .unwrap();
        crate::exec::run(std::process::Command::new("ip").args(["link", "set", "lo", "up"])).unwrap();
        let _socket = std::net::UdpSocket::bind((NODE, 53)).unwrap();
        let holders = Netlink::open()
            .and_then(|nl| nl.all_ipv4())
            .map_err(|e| e.to_string());
        let findings = check(&[NODE], holders, bound_sockets());
        let by_target = severities(&findings);
        assert!(
            by_target.contains(&("169.254.10.10".into(), Severity::Error)),
            "{findings:#?}"
        );
        assert!(
            by_target.contains(&("169.254.10.10:53/udp".into(), Severity::Error)),
            "{findings:#?}"
        );
        assert!(
            by_target.contains(&("169.254.10.10:53/tcp".into(), Severity::Ok)),
            "{findings:#?}"
        );
    }
}
