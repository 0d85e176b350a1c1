//! Decide, then act: the pure [`plan`] from what exists to the steps that make it what is wanted.

use std::fmt;
use std::net::Ipv4Addr;

use super::link::ObservedLink;
use super::model::NftModel;
use super::{LINK_NAME, TABLE_FAMILY, TABLE_NAME};

/// What exists on the host now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub link: Option<ObservedLink>,
    /// Our table, `None` when absent.
    pub table: Option<NftModel>,
}

/// What must exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// The two listener addresses, each held as a /32.
    pub addresses: [Ipv4Addr; 2],
    pub table: NftModel,
}

/// One change to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    CreateDummyLink,
    SetLinkUp,
    RemoveAddress {
        ip: Ipv4Addr,
        prefix: u8,
    },
    AddAddress {
        ip: Ipv4Addr,
    },
    /// Replace our table with the rendered script in one transaction.
    ReplaceTable,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::CreateDummyLink => write!(f, "create dummy link {LINK_NAME}"),
            Step::SetLinkUp => write!(f, "set link {LINK_NAME} up"),
            Step::RemoveAddress { ip, prefix } => {
                write!(f, "remove stale address {ip}/{prefix} from {LINK_NAME}")
            }
            Step::AddAddress { ip } => write!(f, "add {ip}/32 to {LINK_NAME}"),
            Step::ReplaceTable => write!(f, "replace nft table {TABLE_FAMILY} {TABLE_NAME}"),
        }
    }
}

/// A `localdns` link exists and is not ours to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a link named `{LINK_NAME}` already exists with kind {kind}, not dummy; refusing to change or delete it \
     (rename or remove it, or choose another setup)"
)]
pub struct ForeignLink {
    /// The kind netlink reported, or `none` for a link without one (e.g. a physical NIC).
    pub kind: String,
}

/// Whether an observed link is a dummy; `Err` names the kind when it is not.
pub fn check_dummy(link: &ObservedLink) -> Result<(), ForeignLink> {
    match link.kind.as_deref() {
        Some("dummy") => Ok(()),
        other => Err(ForeignLink {
            kind: other.unwrap_or("none").to_owned(),
        }),
    }
}

/// The steps that turn `observed` into `desired`; empty when nothing needs to change.
/// Stale addresses go before new ones; the table comes last.
pub fn plan(observed: &Observed, desired: &Desired) -> Result<Vec<Step>, ForeignLink> {
    let mut steps = Vec::new();
    match &observed.link {
        None => {
            steps.push(Step::CreateDummyLink);
            steps.push(Step::SetLinkUp);
            steps.extend(desired.addresses.iter().map(|&ip| Step::AddAddress { ip }));
        }
        Some(link) => {
            check_dummy(link)?;
            if !link.up {
                steps.push(Step::SetLinkUp);
            }
            for &(ip, prefix) in &link.ipv4 {
                if prefix != 32 || !desired.addresses.contains(&ip) {
                    steps.push(Step::RemoveAddress { ip, prefix });
                }
            }
            for &ip in &desired.addresses {
                if !link.ipv4.contains(&(ip, 32)) {
                    steps.push(Step::AddAddress { ip });
                }
            }
        }
    }
    if observed.table.as_ref() != Some(&desired.table) {
        steps.push(Step::ReplaceTable);
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostnet::NetworkSpec;
    use crate::hostnet::model::desired;

    const NODE: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 10);
    const CLUSTER: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 11);

    fn wanted() -> Desired {
        let spec = NetworkSpec {
            node_listener: NODE,
            cluster_listener: CLUSTER,
            notrack_replies: true,
        };
        Desired {
            addresses: spec.listeners(),
            table: desired(&spec),
        }
    }

    fn link(kind: Option<&str>, up: bool, ipv4: &[(Ipv4Addr, u8)]) -> Option<ObservedLink> {
        Some(ObservedLink {
            index: 7,
            kind: kind.map(str::to_owned),
            up,
            ipv4: ipv4.to_vec(),
        })
    }

    #[test]
    fn empty_host_gets_link_up_both_addresses_and_table() {
        let steps = plan(
            &Observed {
                link: None,
                table: None,
            },
            &wanted(),
        )
        .unwrap();
        assert_eq!(
            steps,
            vec![
                Step::CreateDummyLink,
                Step::SetLinkUp,
                Step::AddAddress { ip: NODE },
                Step::AddAddress { ip: CLUSTER },
                Step::ReplaceTable
            ]
        );
    }

    #[test]
    fn converged_host_needs_no_step() {
        let observed = Observed {
            link: link(Some("dummy"), true, &[(CLUSTER, 32), (NODE, 32)]),
            table: Some(wanted().table),
        };
        assert_eq!(plan(&observed, &wanted()).unwrap(), vec![]);
    }

    #[test]
    fn stale_addresses_and_wrong_prefixes_are_removed_before_adding() {
        let stale = Ipv4Addr::new(169, 254, 20, 10);
        let observed = Observed {
            link: link(Some("dummy"), true, &[(stale, 32), (NODE, 24)]),
            table: Some(wanted().table),
        };
        assert_eq!(
            plan(&observed, &wanted()).unwrap(),
            vec![
                Step::RemoveAddress {
                    ip: stale,
                    prefix: 32
                },
                Step::RemoveAddress { ip: NODE, prefix: 24 },
                Step::AddAddress { ip: NODE },
                Step::AddAddress { ip: CLUSTER },
            ]
        );
    }

    #[test]
    fn down_link_is_set_up() {
        let observed = Observed {
            link: link(Some("dummy"), false, &[(NODE, 32), (CLUSTER, 32)]),
            table: Some(wanted().table),
        };
        assert_eq!(plan(&observed, &wanted()).unwrap(), vec![Step::SetLinkUp]);
    }

    #[test]
    fn different_table_is_replaced() {
        let mut table = wanted().table;
        table.rules.pop();
        let observed = Observed {
            link: link(Some("dummy"), true, &[(NODE, 32), (CLUSTER, 32)]),
            table: Some(table),
        };
        assert_eq!(plan(&observed, &wanted()).unwrap(), vec![Step::ReplaceTable]);
    }

    #[test]
    fn non_dummy_link_is_refused_naming_its_kind() {
        let observed = Observed {
            link: link(Some("bridge"), true, &[]),
            table: None,
        };
        let err = plan(&observed, &wanted()).unwrap_err();
        assert_eq!(err.kind, "bridge");
        assert!(err.to_string().contains("refusing"), "{err}");
    }

    #[test]
    fn link_without_kind_is_refused() {
        let observed = Observed {
            link: link(None, true, &[]),
            table: None,
        };
        assert_eq!(plan(&observed, &wanted()).unwrap_err().kind, "none");
    }
}
