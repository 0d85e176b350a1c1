//! The LocalDNS host network: the `localdns` dummy link and the `ip unbounded_localdns` NOTRACK table.
//!
//! [`apply`] reads what exists ([`link`], [`nft`]), decides with the pure [`plan::plan`] and performs
//! the steps ([`apply::apply`]); [`reset`] removes everything carrying our name. Spec §6 and §9.

pub mod apply;
pub mod from_config;
pub mod link;
pub mod model;
pub mod nft;
pub mod node_leftovers;
pub mod plan;
pub mod reset;

use std::net::Ipv4Addr;

pub use apply::{ApplyError, ApplyReport, apply};
pub use from_config::nft_script;
pub use reset::{ResetPaths, ResetReport, reset};

/// The name of the dummy link holding the listener addresses.
pub const LINK_NAME: &str = "localdns";
/// The nft family and table that hold our NOTRACK rules, and the comment on every rule.
pub use crate::render::host::{
    NFT_COMMENT as RULE_COMMENT, NFT_FAMILY as TABLE_FAMILY, NFT_TABLE as TABLE_NAME,
};

/// What the host network must look like, taken from the validated config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkSpec {
    pub node_listener: Ipv4Addr,
    pub cluster_listener: Ipv4Addr,
    /// Also NOTRACK the listeners' replies in `output` (docs/design.md §6).
    pub notrack_replies: bool,
}

impl NetworkSpec {
    /// Both listener addresses, node first.
    pub fn listeners(&self) -> [Ipv4Addr; 2] {
        [self.node_listener, self.cluster_listener]
    }
}
