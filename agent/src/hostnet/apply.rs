//! The executor: observe the host, plan, perform the steps, verify the table.

use super::link::{LinkError, Netlink};
use super::model::{self, NftModel};
use super::nft::{self, NftError};
use super::plan::{self, Desired, ForeignLink, Observed, Step};
use super::{LINK_NAME, NetworkSpec};

/// What one apply did; no steps means no change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyReport {
    pub steps: Vec<Step>,
}

impl ApplyReport {
    pub fn changed(&self) -> bool {
        !self.steps.is_empty()
    }
}

impl std::fmt::Display for ApplyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.steps.is_empty() {
            return writeln!(f, "localdns network: no change");
        }
        for step in &self.steps {
            writeln!(f, "localdns network: {step}")?;
        }
        Ok(())
    }
}

/// Apply could not bring the host to the wanted state.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    ForeignLink(#[from] ForeignLink),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error(transparent)]
    Nft(#[from] NftError),
    #[error("link {LINK_NAME} vanished while it was being configured")]
    LinkVanished,
    #[error(
        "after applying the rendered script the live table differs from the expected model\n\
         expected: {expected:#?}\nlive: {live:#?}"
    )]
    TableMismatch {
        expected: Box<NftModel>,
        live: Box<Option<NftModel>>,
    },
}

/// What the host holds now.
pub fn observe(netlink: &Netlink) -> Result<Observed, ApplyError> {
    Ok(Observed {
        link: netlink.observe(LINK_NAME)?,
        table: nft::read_table()?,
    })
}

/// What `spec` asks for.
pub fn desired(spec: &NetworkSpec) -> Desired {
    Desired {
        addresses: spec.listeners(),
        table: model::desired(spec),
    }
}

/// Brings the link and table to `spec`, using `script` (the rendered `localdns.nft`) for the table.
/// A foreign `localdns` link is refused before anything changes. Idempotent.
pub fn apply(spec: &NetworkSpec, script: &str) -> Result<ApplyReport, ApplyError> {
    let netlink = Netlink::open()?;
    let desired = desired(spec);
    let steps = plan::plan(&observe(&netlink)?, &desired)?;
    for step in &steps {
        let _span = tracing::info_span!("localdns_network_step", %step).entered();
        perform(&netlink, step, script)?;
    }
    if steps.contains(&Step::ReplaceTable) {
        let live = nft::read_table()?;
        if live.as_ref() != Some(&desired.table) {
            return Err(ApplyError::TableMismatch {
                expected: Box::new(desired.table),
                live: Box::new(live),
            });
        }
    }
    Ok(ApplyReport { steps })
}

fn link_index(netlink: &Netlink) -> Result<u32, ApplyError> {
    Ok(netlink.observe(LINK_NAME)?.ok_or(ApplyError::LinkVanished)?.index)
}

fn perform(netlink: &Netlink, step: &Step, script: &str) -> Result<(), ApplyError> {
    match *step {
        Step::CreateDummyLink => netlink.create_dummy(LINK_NAME)?,
        Step::SetLinkUp => netlink.set_up(link_index(netlink)?)?,
        Step::RemoveAddress { ip, prefix } => netlink.remove_address(link_index(netlink)?, ip, prefix)?,
        Step::AddAddress { ip } => netlink.add_address(link_index(netlink)?, ip, 32)?,
        Step::ReplaceTable => nft::replace_table(script)?,
    }
    Ok(())
}
