//! `repave`: the node moves to the other slot (A/B). The target slot is prepared completely while
//! the source runs (every download happens in `preparing`, so an offline node repaves offline);
//! `switching` stops the source and moves the slot-specific host state (the LocalDNS network
//! unit, the nspawn drop-ins, the applied config) to the target; `starting` and `verifying` bring
//! the target up and check it (a new machine boot id, LocalDNS ready, kubelet active); only after
//! `committed` is the source removed (`cleaning`). A failure in `starting` or `verifying` returns
//! the node to the source slot; a run killed anywhere is finished by the next `repave`.

use std::path::Path;

use super::error::LifecycleError;
use super::execute::{Executor, boot_id, start_slot, stop_node};
use super::node_reset;
use super::plan::Operation;
use super::repave_state::{Phase, RepaveState};
use crate::files::under;
use crate::machine::machinectl;
use crate::names::Slot;
use crate::render::{Rendered, paths};
use crate::start::node;
use crate::start::{StartError, files::write_changed, rootfs};

/// The record to write before `phase` runs.
pub fn record_for(exec: &Executor, phase: Phase) -> Result<RepaveState, StartError> {
    if let Some(r) = &exec.repave {
        return Ok(RepaveState { phase, ..r.clone() });
    }
    let from = exec.slot;
    let to = match exec.op {
        Operation::Repave { to: Some(to) } => to,
        _ => from.other(),
    };
    let source_boot_id = if machinectl::is_running(from.as_str())? {
        boot_id(from)?
    } else {
        String::new()
    };
    Ok(RepaveState {
        from,
        to,
        phase,
        config_sha256: exec.config().sha256.clone(),
        source_boot_id,
    })
}

/// True for the host files that belong to whichever slot is active: the LocalDNS network unit and
/// its enablement (one unit, naming the slot it starts before), and the upstreams' path unit,
/// refresh and enablement (they act on the active slot).
fn moves_at_switch(path: &Path) -> bool {
    [
        paths::NETWORK_UNIT,
        paths::NETWORK_UNIT_WANTS_LINK,
        paths::UPSTREAMS_PATH_UNIT,
        paths::UPSTREAMS_PATH_WANTS_LINK,
        paths::UPSTREAMS_SERVICE,
    ]
    .iter()
    .any(|p| path == Path::new(p))
}

fn split(rendered: Rendered, at_switch: bool) -> Rendered {
    Rendered {
        files: rendered
            .files
            .into_iter()
            .filter(|f| moves_at_switch(&f.path) == at_switch)
            .collect(),
        links: rendered
            .links
            .into_iter()
            .filter(|l| moves_at_switch(&l.path) == at_switch)
            .collect(),
    }
}

/// Runs one phase.
pub fn run_phase(exec: &mut Executor, phase: Phase) -> Result<(), LifecycleError> {
    let record = exec
        .repave
        .clone()
        .expect("the phase was recorded before it runs");
    let (from, to) = (record.from, record.to);
    match phase {
        Phase::Preparing => preparing(exec, from, to)?,
        Phase::Switching => {
            stop_node(from, exec.progress)?;
            machinectl::disable(from.as_str())?;
            exec.write_applied(to)?;
            let moved = write_changed(&exec.root, &split(exec.render(to)?, true), |_| true)?;
            for path in moved {
                exec.line(&format!("moved {} to {to}", path.display()));
            }
            let dropin = paths::nspawn_drop_in(from);
            let _ = std::fs::remove_file(under(&exec.root, Path::new(&dropin)));
            node::daemon_reload()?;
        }
        Phase::Starting | Phase::Verifying => {
            let result = if phase == Phase::Starting {
                rootfs::image_archives(&exec.config().config).and_then(|images| start_slot(exec, to, &images))
            } else {
                verify(exec, &record)
            };
            if let Err(cause) = result {
                return Err(roll_back(exec, &record, phase, cause.to_string()));
            }
        }
        Phase::Committed => {
            let mut state = exec.state.clone().expect("a finished node has a state");
            state.slot = to;
            exec.save_state(state)?;
            exec.commit(to)?;
        }
        Phase::Cleaning => {
            let report = node_reset::remove_slot(&exec.root, from);
            for line in report.to_string().lines() {
                exec.line(line);
            }
            node::daemon_reload()?;
            if !report.is_clean() {
                return Err(LifecycleError::ResetIncomplete {
                    report: report.to_string(),
                });
            }
            exec.slot = to;
        }
    }
    Ok(())
}

/// The target's rootfs, binaries, images and files; the source runs on. A leftover target (an
/// earlier repave that did not commit) is removed first when this repave begins.
fn preparing(exec: &mut Executor, from: Slot, to: Slot) -> Result<(), LifecycleError> {
    if exec.observation.planner.repave.is_none() {
        let report = node_reset::remove_slot(&exec.root, to);
        if !report.is_clean() {
            return Err(LifecycleError::ResetIncomplete {
                report: report.to_string(),
            });
        }
    }
    exec.line(&format!("preparing {to} while {from} runs"));
    exec.write_applied(to)?;
    let target = under(&exec.root, &to.rootfs());
    if rootfs::install_rootfs(&exec.config().config, &target, true, &exec.fetcher)? {
        exec.line(&format!("unpacked the machine rootfs to {}", target.display()));
    }
    let rendered = split(exec.render(to)?, false);
    exec.populate(to, Some(rendered))?;
    Ok(())
}

/// The target answers as a new machine: another boot id than the source's, LocalDNS ready,
/// kubelet active.
fn verify(exec: &Executor, record: &RepaveState) -> Result<(), StartError> {
    let to = record.to;
    let now = boot_id(to)?;
    if !record.source_boot_id.is_empty() && now == record.source_boot_id {
        return Err(StartError::Io {
            action: "verify the boot id of",
            path: to.rootfs(),
            source: std::io::Error::other(format!("machine {to} kept the source's boot id {now}")),
        });
    }
    node::localdns_ready(&exec.config().config, exec.waits, exec.progress)?;
    machinectl::wait_unit_active(
        &Executor::runner(to),
        "kubelet.service",
        exec.waits.kubelet(),
        node::KUBELET_POLL,
    )?;
    exec.line(&format!(
        "{to} verified: boot id {now}, LocalDNS ready, kubelet active"
    ));
    Ok(())
}

/// The target did not come up: stop it, give the source back its host state, start it, remove
/// the target and the record.
fn roll_back(exec: &mut Executor, record: &RepaveState, phase: Phase, cause: String) -> LifecycleError {
    let (from, to) = (record.from, record.to);
    exec.line(&format!(
        "{phase:?} failed: {cause}; returning the node to {from}"
    ));
    let result = (|| -> Result<(), LifecycleError> {
        stop_node(to, exec.progress)?;
        machinectl::disable(to.as_str())?;
        let applied = node::applied_paths(&exec.root, from).0;
        let source = super::observe::LoadedConfig::load(&applied)?;
        let images = rootfs::image_archives(&source.config)?;
        exec.observation.config = Some(source);
        write_changed(&exec.root, &split(exec.render(from)?, true), |_| true)?;
        write_changed(&exec.root, &exec.render(from)?, |p| {
            p == Path::new(&paths::nspawn_drop_in(from))
        })?;
        node::daemon_reload()?;
        start_slot(exec, from, &images)?;
        let report = node_reset::remove_slot(&exec.root, to);
        if !report.is_clean() {
            return Err(LifecycleError::ResetIncomplete {
                report: report.to_string(),
            });
        }
        super::repave_state::clear(&exec.repave_path)?;
        exec.repave = None;
        Ok(())
    })();
    match result {
        Ok(()) => LifecycleError::RolledBack {
            from,
            to,
            phase: phase.as_str(),
            cause,
        },
        Err(e) => LifecycleError::RollbackFailed {
            from,
            to,
            phase: phase.as_str(),
            cause,
            rollback: e.to_string(),
        },
    }
}
