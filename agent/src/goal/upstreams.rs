//! Upstream discovery (docs/design.md §3): which resolvers the node listener forwards to.

use std::net::Ipv4Addr;

use super::GoalError;
use super::facts::HostFacts;

/// systemd-resolved's stub listeners.
pub const RESOLVED_STUBS: [Ipv4Addr; 2] = [Ipv4Addr::new(127, 0, 0, 53), Ipv4Addr::new(127, 0, 0, 54)];

/// The `nameserver` values of a resolv.conf that are IPv4 and neither
/// unspecified nor multicast, in file order. Tabs, leading blanks, comments
/// (`#`, `;`, also right after the address as in `10.0.0.2#lab`, which glibc
/// reads as 10.0.0.2) and trailing words are tolerated.
pub fn nameservers(resolv_conf: &str) -> Vec<Ipv4Addr> {
    resolv_conf
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            if words.next()? != "nameserver" {
                return None;
            }
            let address = words.next()?.split(['#', ';']).next()?;
            let ip: Ipv4Addr = address.parse().ok()?;
            (!ip.is_unspecified() && !ip.is_multicast()).then_some(ip)
        })
        .collect()
}

/// Discovers the upstreams from the host facts; `listeners` are never upstreams.
pub fn discover(facts: &HostFacts, listeners: &[Ipv4Addr]) -> Result<Vec<Ipv4Addr>, GoalError> {
    let host = nameservers(&facts.host_resolv_conf);
    if !host.iter().any(Ipv4Addr::is_loopback) {
        return usable(host, listeners, "/etc/resolv.conf");
    }
    let foreign: Vec<String> = host
        .iter()
        .filter(|ip| !RESOLVED_STUBS.contains(ip))
        .map(ToString::to_string)
        .collect();
    if !foreign.is_empty() {
        return Err(GoalError::UnsupportedStub {
            nameservers: foreign.join(", "),
        });
    }
    let f = &facts.optional;
    let domains = needed(
        &f.resolvectl_domain,
        "resolvectl_domain",
        "checking for split DNS behind systemd-resolved",
    )?;
    let routes = split_dns_routes(domains);
    if !routes.is_empty() {
        return Err(GoalError::SplitDns {
            routes: routes.join(", "),
        });
    }
    let resolved = needed(
        &f.resolved_resolv_conf,
        "resolved_resolv_conf",
        "reading systemd-resolved's upstream nameservers",
    )?;
    let direct = nameservers(resolved)
        .into_iter()
        .filter(|ip| !ip.is_loopback())
        .collect();
    usable(direct, listeners, "/run/systemd/resolve/resolv.conf")
}

/// A fact this branch needs, or the error naming it.
fn needed<'a>(
    fact: &'a Option<String>,
    name: &'static str,
    needed_for: &'static str,
) -> Result<&'a str, GoalError> {
    fact.as_deref().ok_or(GoalError::MissingFact {
        fact: name,
        needed_for,
    })
}

/// `ips` without the listeners, sorted and distinct; none left is an error naming `source_file`.
fn usable(
    mut ips: Vec<Ipv4Addr>,
    listeners: &[Ipv4Addr],
    source_file: &'static str,
) -> Result<Vec<Ipv4Addr>, GoalError> {
    ips.retain(|ip| !listeners.contains(ip));
    ips.sort();
    ips.dedup();
    if ips.is_empty() {
        return Err(GoalError::NoUpstream { source_file });
    }
    Ok(ips)
}

/// Routing domains other than `~.` in `resolvectl domain` output (lines such
/// as `Link 2 (ens2): ~. example.com ~corp.example`). Plain search domains are
/// not routes of their own and are allowed.
pub fn split_dns_routes(resolvectl_domain: &str) -> Vec<String> {
    let mut routes = Vec::new();
    for line in resolvectl_domain.lines() {
        let Some((_, list)) = line.split_once(':') else {
            continue;
        };
        for d in list.split_whitespace() {
            if d.starts_with('~') && d != "~." && !routes.iter().any(|r| r == d) {
                routes.push(d.to_owned());
            }
        }
    }
    routes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::goal::facts::OptionalFacts;
    use rstest::rstest;

    const L: [Ipv4Addr; 2] = [Ipv4Addr::new(169, 254, 10, 10), Ipv4Addr::new(169, 254, 10, 11)];

    fn facts(host: &str, resolved: Option<&str>, domains: Option<&str>) -> HostFacts {
        HostFacts {
            host_resolv_conf: host.to_owned(),
            optional: OptionalFacts {
                resolved_resolv_conf: resolved.map(str::to_owned),
                resolvectl_domain: domains.map(str::to_owned),
                ..Default::default()
            },
        }
    }

    fn ips(list: &[&str]) -> Vec<Ipv4Addr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[rstest]
    #[case::plain("nameserver 10.0.0.2\n", &["10.0.0.2"])]
    #[case::tabs_and_indentation("\t nameserver\t10.0.0.3 \n  nameserver 10.0.0.2\t# lab\n", &["10.0.0.2", "10.0.0.3"])]
    #[case::comments_ignored("# nameserver 10.9.9.9\n; nameserver 10.8.8.8\nnameserver 10.0.0.2\n", &["10.0.0.2"])]
    #[case::comment_glued_to_the_address("nameserver 10.0.0.2#lab\nnameserver 10.0.0.3;x\nnameserver #10.0.0.4\n", &["10.0.0.2", "10.0.0.3"])]
    #[case::duplicates_removed_and_sorted("nameserver 10.0.0.9\nnameserver 10.0.0.2\nnameserver 10.0.0.9\n", &["10.0.0.2", "10.0.0.9"])]
    #[case::ipv6_unspecified_multicast_dropped("nameserver fd00::1\nnameserver 0.0.0.0\nnameserver 224.0.0.251\nnameserver 10.0.0.2\n", &["10.0.0.2"])]
    #[case::listeners_never_upstreams("nameserver 169.254.10.10\nnameserver 169.254.10.11\nnameserver 10.0.0.2\n", &["10.0.0.2"])]
    fn direct_nameservers_become_upstreams(#[case] host: &str, #[case] want: &[&str]) {
        assert_eq!(discover(&facts(host, None, None), &L).unwrap(), ips(want));
    }

    #[rstest]
    #[case::empty_file("")]
    #[case::only_ipv6("nameserver fd00::1\n")]
    #[case::only_listeners("nameserver 169.254.10.10\n")]
    fn no_usable_direct_nameserver_is_an_error(#[case] host: &str) {
        let e = discover(&facts(host, None, None), &L).unwrap_err();
        assert!(
            e.to_string()
                .contains("host resolver contains no usable direct IPv4 nameserver"),
            "{e}"
        );
    }

    #[rstest]
    #[case::other_loopback("nameserver 127.0.0.1\n", "127.0.0.1")]
    #[case::stub_mixed_with_direct("nameserver 127.0.0.53\nnameserver 10.0.0.2\n", "10.0.0.2")]
    fn a_loopback_resolver_other_than_resolved_is_refused(#[case] host: &str, #[case] named: &str) {
        let e = discover(&facts(host, Some("nameserver 10.0.0.2\n"), Some("Global:\n")), &L).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("unsupported local caching stub") && text.contains(named),
            "{text}"
        );
    }

    #[rstest]
    #[case::stub_53("nameserver 127.0.0.53\n")]
    #[case::stub_54("\tnameserver 127.0.0.54\noptions edns0 trust-ad\n")]
    fn resolved_stub_takes_upstreams_from_resolved(#[case] host: &str) {
        let resolved =
            "nameserver 10.0.0.3\nnameserver 10.0.0.2\nnameserver 127.0.0.1\nnameserver 169.254.10.10\n";
        let domains = "Global:\nLink 2 (ens2): ~. lab.example\n";
        assert_eq!(
            discover(&facts(host, Some(resolved), Some(domains)), &L).unwrap(),
            ips(&["10.0.0.2", "10.0.0.3"])
        );
    }

    #[test]
    fn split_dns_behind_resolved_is_an_error() {
        let domains = "Global:\nLink 2 (ens2): ~.\nLink 3 (wg0): ~corp.example\n";
        let e = discover(
            &facts(
                "nameserver 127.0.0.53\n",
                Some("nameserver 10.0.0.2\n"),
                Some(domains),
            ),
            &L,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("split DNS") && e.to_string().contains("~corp.example"),
            "{e}"
        );
    }

    #[test]
    fn resolved_without_usable_upstreams_is_an_error() {
        let e = discover(
            &facts(
                "nameserver 127.0.0.53\n",
                Some("nameserver 127.0.0.1\n"),
                Some(""),
            ),
            &L,
        )
        .unwrap_err();
        assert!(e.to_string().contains("/run/systemd/resolve/resolv.conf"), "{e}");
    }

    #[rstest]
    #[case::domains_missing(None, Some("nameserver 10.0.0.2\n"), "resolvectl_domain")]
    #[case::resolved_file_missing(Some(""), None, "resolved_resolv_conf")]
    fn missing_resolved_facts_are_named(
        #[case] domains: Option<&str>,
        #[case] resolved: Option<&str>,
        #[case] fact: &str,
    ) {
        let e = discover(&facts("nameserver 127.0.0.53\n", resolved, domains), &L).unwrap_err();
        assert!(
            matches!(e, GoalError::MissingFact { fact: f, .. } if f == fact),
            "{e}"
        );
    }
}
