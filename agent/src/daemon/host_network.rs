//! The daemon's check of LocalDNS's host network on each pass: on a finished, idle node whose
//! applied config has LocalDNS on, the `localdns` link, its two addresses and our nft table are
//! brought back to what the config asks for (the same idempotent apply as
//! `unbounded-agent localdns network apply`), so a link or table removed by hand comes back within
//! one resync. Without its addresses CoreDNS cannot serve, and `localdns.service` may have failed
//! meanwhile, taking kubelet (which requires it) down with it: after a repair, a kubelet that is
//! not active is started again (containerd first, LocalDNS with it), as `start` does on a
//! finished node. Nothing is done while another agent holds the host lock (an operation by hand)
//! or an operation or repave is recorded as under way: those change the network themselves.

use std::path::Path;

use crate::files::under;
use crate::hostnet::{self, ApplyReport, NetworkSpec};
use crate::install_state::{self, Stage};
use crate::lifecycle::{lock, repave_state};
use crate::start::node::applied_paths;

/// What one check found.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    /// Not checked, and why (no finished node, LocalDNS off, an operation under way).
    Skipped(String),
    /// The host network is as the applied config asks.
    InPlace,
    /// These steps brought it back; `restarted`: the machine's units started again after it.
    Repaired {
        report: ApplyReport,
        restarted: Vec<String>,
    },
}

/// Checks (and repairs) the host network of the node below `root`; `Err` when the repair itself
/// failed (a foreign `localdns` link, netlink or nft refusing), naming why.
pub fn check(root: &Path) -> Result<Checked, String> {
    let skipped = |why: &str| Ok(Checked::Skipped(why.to_owned()));
    let Ok(_lock) = lock::take(root, "the daemon's host network check") else {
        return skipped("another agent holds the host lock");
    };
    let state = match install_state::load(&under(root, Path::new(install_state::PATH))) {
        Ok(Some(state)) => state,
        Ok(None) => return skipped("no node is installed"),
        Err(err) => return Err(format!("reading the install state: {err}")),
    };
    if state.stage != Stage::Complete || state.operation.is_some() {
        return skipped("the node is not finished or an operation is under way");
    }
    if matches!(
        repave_state::load(&under(root, Path::new(repave_state::PATH))),
        Ok(Some(_))
    ) {
        return skipped("a repave is under way");
    }
    let (applied, _) = applied_paths(root, state.slot);
    let text = std::fs::read_to_string(&applied)
        .map_err(|e| format!("reading the applied config {}: {e}", applied.display()))?;
    let config = crate::validate::parse(&text)
        .map_err(|p| format!("the applied config {}: {p}", applied.display()))?;
    let Some(local_dns) = &config.local_dns else {
        return skipped("LocalDNS is off");
    };
    let spec = NetworkSpec::from_config(local_dns);
    let script = hostnet::nft_script(&config, local_dns);
    let report = hostnet::apply(&spec, &script).map_err(|e| crate::error_chain::chain(&e))?;
    if !report.changed() {
        return Ok(Checked::InPlace);
    }
    let restarted = start_kubelet_again(state.slot)
        .map_err(|e| format!("the network is back, but {}", crate::error_chain::chain(&e)))?;
    Ok(Checked::Repaired { report, restarted })
}

/// Starts containerd and kubelet in the slot's machine when kubelet is not active (the machine
/// running); returns what it started.
fn start_kubelet_again(slot: crate::names::Slot) -> Result<Vec<String>, crate::start::StartError> {
    let runner = crate::machine::MachineRunner::new(slot.as_str());
    if !crate::machine::machinectl::is_running(runner.machine())?
        || runner.unit_state("kubelet.service")? == "active"
    {
        return Ok(Vec::new());
    }
    let waits = crate::start::node::Waits::given_or_detected(None);
    crate::start::node::containerd(&runner, waits)?;
    crate::start::node::kubelet(&runner, waits)?;
    Ok(vec!["kubelet.service".to_string()])
}

/// One line naming what a repair did (for the log and the Machine's condition).
pub fn describe(report: &ApplyReport, restarted: &[String]) -> String {
    let steps: Vec<String> = report.steps.iter().map(ToString::to_string).collect();
    let mut line = format!("restored the LocalDNS host network: {}", steps.join(", "));
    if !restarted.is_empty() {
        line += &format!(
            "; started again in the machine (stopped with LocalDNS meanwhile): {}",
            restarted.join(", ")
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_node_and_an_unfinished_node_are_skipped_without_touching_the_network() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(
            check(root.path()),
            Ok(Checked::Skipped("no node is installed".into()))
        );
        let path = under(root.path(), Path::new(install_state::PATH));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let state = install_state::InstallState::new(crate::names::Slot::Kube1, Stage::StartingNode, "ab");
        install_state::save(&path, &state).unwrap();
        assert_eq!(
            check(root.path()),
            Ok(Checked::Skipped(
                "the node is not finished or an operation is under way".into()
            ))
        );
    }

    #[test]
    fn a_held_host_lock_skips_the_check() {
        let root = tempfile::tempdir().unwrap();
        let _held = lock::take(root.path(), "a test").unwrap();
        assert_eq!(
            check(root.path()),
            Ok(Checked::Skipped("another agent holds the host lock".into()))
        );
    }
}
