//! The metrics address when `LocalDNS.MetricsAddress` is not set (docs/design.md §5).

use std::net::{IpAddr, Ipv4Addr};

use super::GoalError;
use super::facts::HostFacts;
use crate::names::{MetricsAddress, UnicastIpv4};

/// First IPv4 of `Kubelet.NodeIP`; else the node name if it is a local IPv4;
/// else the first local address the node name resolves to; else the
/// default-route address. Port 9253. Wildcard and loopback are never chosen.
pub fn derive(node_ips: &[IpAddr], node_name: &str, facts: &HostFacts) -> Result<MetricsAddress, GoalError> {
    let usable = |ip: Ipv4Addr| UnicastIpv4::try_from(ip).ok();
    let chosen = node_ips
        .iter()
        .filter_map(|ip| match ip {
            IpAddr::V4(v4) => usable(*v4),
            IpAddr::V6(_) => None,
        })
        .next();
    let chosen = match chosen {
        Some(ip) => ip,
        None => from_host(node_name, facts, usable)?,
    };
    Ok(MetricsAddress::new(chosen, MetricsAddress::DEFAULT_PORT).expect("the default port is not 0"))
}

fn from_host(
    node_name: &str,
    facts: &HostFacts,
    usable: impl Fn(Ipv4Addr) -> Option<UnicastIpv4>,
) -> Result<UnicastIpv4, GoalError> {
    let f = &facts.optional;
    let local = || {
        f.local_addresses.as_deref().ok_or(GoalError::MissingFact {
            fact: "local_addresses",
            needed_for: "deriving the metrics address (Kubelet.NodeIP has no IPv4)",
        })
    };
    if let Ok(ip) = node_name.parse::<Ipv4Addr>() {
        if local()?.contains(&ip)
            && let Some(u) = usable(ip)
        {
            return Ok(u);
        }
    } else {
        let looked_up = f.node_name_addresses.as_deref().ok_or(GoalError::MissingFact {
            fact: "node_name_addresses",
            needed_for: "deriving the metrics address from the node name",
        })?;
        let local = local()?;
        if let Some(u) = looked_up
            .iter()
            .filter(|ip| local.contains(ip))
            .find_map(|ip| usable(*ip))
        {
            return Ok(u);
        }
    }
    let route = f.default_route_address.ok_or(GoalError::MissingFact {
        fact: "default_route_address",
        needed_for: "deriving the metrics address (no node IP, node name gives no local address)",
    })?;
    usable(route).ok_or(GoalError::NoMetricsAddress { candidate: route })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::goal::facts::OptionalFacts;
    use rstest::rstest;

    fn facts(local: Option<&[&str]>, lookup: Option<&[&str]>, route: Option<&str>) -> HostFacts {
        let list = |l: &[&str]| l.iter().map(|s| s.parse().unwrap()).collect();
        HostFacts {
            host_resolv_conf: String::new(),
            optional: OptionalFacts {
                local_addresses: local.map(list),
                node_name_addresses: lookup.map(list),
                default_route_address: route.map(|s| s.parse().unwrap()),
                ..Default::default()
            },
        }
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[rstest]
    #[case::first_ipv4_of_node_ip(&["fd00::5", "10.0.0.5", "10.0.0.6"], "node1", facts(None, None, None), "10.0.0.5:9253")]
    #[case::node_name_is_a_local_ipv4(&[], "10.0.0.7", facts(Some(&["10.0.0.7"]), None, Some("10.0.0.9")), "10.0.0.7:9253")]
    #[case::node_name_ipv4_not_local_falls_to_route(&[], "10.0.0.7", facts(Some(&["10.0.0.8"]), None, Some("10.0.0.9")), "10.0.0.9:9253")]
    #[case::lookup_result_that_is_local(&[], "node1", facts(Some(&["127.0.1.1", "10.0.0.8"]), Some(&["127.0.1.1", "10.0.0.8"]), Some("10.0.0.9")), "10.0.0.8:9253")]
    #[case::lookup_not_local_falls_to_route(&[], "node1", facts(Some(&["10.0.0.8"]), Some(&["10.1.1.1"]), Some("10.0.0.9")), "10.0.0.9:9253")]
    #[case::ipv6_only_node_ip_falls_through(&["fd00::5"], "node1", facts(Some(&[]), Some(&[]), Some("10.0.0.9")), "10.0.0.9:9253")]
    fn metrics_address_is_derived_in_spec_order(
        #[case] node_ips: &[&str],
        #[case] node_name: &str,
        #[case] facts: HostFacts,
        #[case] want: &str,
    ) {
        assert_eq!(
            derive(&ips(node_ips), node_name, &facts).unwrap().to_string(),
            want
        );
    }

    #[rstest]
    #[case::lookup_missing(facts(Some(&[]), None, Some("10.0.0.9")), "node_name_addresses")]
    #[case::local_missing(facts(None, Some(&[]), Some("10.0.0.9")), "local_addresses")]
    #[case::route_missing(facts(Some(&[]), Some(&[]), None), "default_route_address")]
    fn a_missing_fact_is_named(#[case] facts: HostFacts, #[case] fact: &str) {
        let e = derive(&[], "node1", &facts).unwrap_err();
        assert!(
            matches!(e, GoalError::MissingFact { fact: f, .. } if f == fact),
            "{e}"
        );
        assert!(e.to_string().contains(fact), "{e}");
    }

    #[test]
    fn a_loopback_default_route_is_never_chosen() {
        let e = derive(&[], "node1", &facts(Some(&[]), Some(&[]), Some("127.0.0.1"))).unwrap_err();
        assert!(matches!(e, GoalError::NoMetricsAddress { .. }), "{e}");
    }
}
