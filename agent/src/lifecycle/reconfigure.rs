//! `apply`'s in-place step: the node's files for the new config written, the files the old
//! manifest has and the new one lacks removed, and only what must restart restarted — LocalDNS
//! turned off takes down its host network and machine units (kubelet back on
//! `Cluster.ClusterDNS`); turned on, it installs CoreDNS and brings everything back; changed, it
//! restarts `localdns.service` and re-applies the NOTRACK table. The agent daemon is installed,
//! kept or removed as the new config's `Daemon` section says. Running pods keep running:
//! kubelet restarts, containers do not.

use std::path::{Path, PathBuf};

use super::execute::Executor;
use super::manifest::{self, Entry};
use crate::files::beneath::{Beneath, existing_beneath};
use crate::files::under;
use crate::hostnet;
use crate::machine::runner::MachineRunner;
use crate::paths;
use crate::start::StartError;
use crate::start::{localdns_restart, node};

/// What the change touched, by where it lives.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Touched {
    pub host_units: bool,
    pub machine_units: bool,
    pub localdns: bool,
    /// LocalDNS changed only in files a reload takes (`supervisor::reload`): the Corefile, the
    /// fallback Corefile (read when it is needed) and `node-upstreams` (read by no process).
    pub reload_enough: bool,
    pub kubelet: bool,
}

/// Sorts touched host paths of a slot whose rootfs is `rootfs` into what must reload or restart.
pub fn touched(paths: &[PathBuf], rootfs: &Path) -> Touched {
    let mut t = Touched::default();
    let mut localdns_beyond_a_reload = false;
    for path in paths {
        match path.strip_prefix(rootfs) {
            Ok(inside) => {
                let inside = Path::new("/").join(inside);
                if inside.starts_with("/etc/systemd") {
                    t.machine_units = true;
                }
                if inside.starts_with(paths::LOCALDNS_DIR)
                    || [
                        paths::LOCALDNS_SERVICE,
                        paths::LOCALDNS_SLICE,
                        paths::COREDNS_BINARY,
                        paths::SUPERVISOR_BINARY,
                    ]
                    .iter()
                    .any(|p| inside == Path::new(p))
                {
                    t.localdns = true;
                    localdns_beyond_a_reload |=
                        ![paths::COREFILE, paths::FALLBACK_COREFILE, paths::NODE_UPSTREAMS]
                            .iter()
                            .any(|p| inside == Path::new(p));
                }
                if inside == Path::new(paths::KUBELET_CONFIG)
                    || inside == Path::new(paths::KUBELET_DROP_IN)
                    || inside.starts_with("/etc/systemd/system/kubelet.service")
                {
                    t.kubelet = true;
                }
            }
            Err(_) if path.starts_with("/etc/systemd/system") => t.host_units = true,
            Err(_) => {}
        }
    }
    t.reload_enough = t.localdns && !localdns_beyond_a_reload;
    t
}

/// `localdns.service`, the spare's, the bridge's and the slice's unit files in the machine.
fn is_localdns_unit_file(path: &Path, rootfs: &Path) -> bool {
    [
        paths::LOCALDNS_SERVICE,
        paths::LOCALDNS_SPARE_SERVICE,
        paths::LOCALDNS_BRIDGE_SERVICE,
        paths::LOCALDNS_SLICE,
    ]
    .iter()
    .any(|unit| {
        path.strip_prefix(rootfs)
            .is_ok_and(|inside| Path::new("/").join(inside) == Path::new(unit))
    })
}

/// LocalDNS off: stops its units before their unit files are removed. With a unit's file gone and
/// systemd reloaded, stopping it falls back to systemd's defaults: `KillMode=control-group`
/// sent SIGTERM to both CoreDNS beside the supervisor, which then took the serving one's exit
/// for a crash, could not start another (its binary and Corefile were gone) and failed the unit,
/// left `not-found failed` in the machine (seen on a lab node). Stopped while their files are
/// there, `KillMode=mixed` tells only the supervisor, which stops both CoreDNS itself.
/// The slice outlives its service until it is stopped too. A unit already down is left alone:
/// with its file gone `systemctl stop` would fail on it (a re-run after an interruption). The
/// spare and the bridge are stopped by name: they do not stop with the slice. One `is-active`
/// and one `stop` for all four (each command in the machine costs most of a second under
/// emulation; a unit at a time took ~9 s of a ~38 s LocalDNS off); then one more `is-active` and
/// a `reset-failed` of the failed ones, so none is left listed once its file is gone.
fn stop_localdns_units(exec: &mut Executor, runner: &MachineRunner) -> Result<(), StartError> {
    let units = [
        crate::supervisor::spare::UNIT,
        "localdns.service",
        crate::supervisor::restart_bridge::BRIDGE_UNIT,
        "localdns.slice",
    ];
    let states = runner.unit_states(&units)?;
    let up: Vec<&str> = units
        .iter()
        .zip(&states)
        .filter(|(_, state)| *state != "inactive")
        .map(|(unit, _)| *unit)
        .collect();
    if up.is_empty() {
        return Ok(());
    }
    let mut argv = vec!["systemctl", "stop"];
    argv.extend_from_slice(&up);
    runner.run(&argv)?;
    // A unit stopped cleanly may be unloaded at once (`reset-failed` would refuse it as not
    // loaded); one that failed stays loaded until reset.
    let failed: Vec<&str> = units
        .iter()
        .zip(runner.unit_states(&units)?)
        .filter(|(_, state)| state == "failed")
        .map(|(unit, _)| *unit)
        .collect();
    if !failed.is_empty() {
        let mut argv = vec!["systemctl", "reset-failed"];
        argv.extend_from_slice(&failed);
        runner.run(&argv)?;
    }
    for unit in up {
        exec.line(&format!("stopped {unit}"));
    }
    Ok(())
}

/// Runs the step on the executor's slot.
pub fn run(exec: &mut Executor) -> Result<(), StartError> {
    let slot = exec.slot;
    let rootfs = slot.rootfs();
    let service = rootfs.join(paths::LOCALDNS_SERVICE.trim_start_matches('/'));
    let old: Vec<Entry> = exec
        .state
        .as_ref()
        .map(|s| s.manifest.slot(slot).to_vec())
        .unwrap_or_default();
    let was_on = old.iter().any(|e| e.path == service)
        || exec
            .observation
            .applied
            .as_ref()
            .is_some_and(|a| a.config.local_dns.is_some());
    let now_on = exec.config().config.local_dns.is_some();

    exec.write_applied(slot)?;
    let rendered = exec.render(slot)?;
    exec.populate(slot, Some(rendered))?;
    let new: Vec<Entry> = exec
        .state
        .as_ref()
        .map(|s| s.manifest.slot(slot).to_vec())
        .unwrap_or_default();
    let stale = manifest::stale(&old, &new);
    let mut all = manifest::changed(&old, &new);
    let runner = Executor::runner(slot);
    let now_off = !now_on;
    // LocalDNS off: its own unit files stay until its units are stopped (`stop_localdns_units`);
    // everything else goes first, the containerd and kubelet drop-ins that require
    // `localdns.service` among them, so that stopping it stops neither.
    let (unit_files, first): (Vec<PathBuf>, Vec<PathBuf>) = stale
        .iter()
        .cloned()
        .partition(|path| now_off && is_localdns_unit_file(path, &rootfs));
    for path in &first {
        remove(&exec.root, &rootfs, path)?;
        exec.line(&format!("removed {}", path.display()));
    }
    all.extend(stale.iter().cloned());
    let t = touched(&all, &rootfs);
    if t.host_units {
        node::daemon_reload()?;
    }
    if t.machine_units {
        runner.run(&["systemctl", "daemon-reload"])?;
    }
    if now_off {
        stop_localdns_units(exec, &runner)?;
    }
    for path in &unit_files {
        remove(&exec.root, &rootfs, path)?;
        exec.line(&format!("removed {}", path.display()));
    }
    if !unit_files.is_empty() {
        runner.run(&["systemctl", "daemon-reload"])?;
    }
    let config = &exec.config().config;
    // Off: always brought down (each part idempotent), so a re-run after an interruption whose
    // records already say "off" still converges.
    if now_off {
        let report = hostnet::reset(&hostnet::ResetPaths::new(&exec.root));
        for line in report.to_string().lines() {
            exec.line(line);
        }
        if !report.is_clean() {
            return Err(StartError::Io {
                action: "remove the LocalDNS host network",
                path: paths::NETWORK_UNIT.into(),
                source: std::io::Error::other(report.to_string()),
            });
        }
    }
    if now_on {
        node::host_network(config, exec.progress)?;
        // `systemctl start` leaves a running unit alone, so these converge on a re-run too.
        if exec.root == Path::new("/") {
            crate::exec::run(
                std::process::Command::new("systemctl").args(["start", paths::NETWORK_UNIT_NAME]),
            )?;
        }
        if was_on && t.reload_enough {
            reload_localdns(exec, &runner)?;
        } else if was_on && t.localdns {
            localdns_restart::restart_localdns(&runner, config, exec.waits, exec.progress)?;
            exec.line("restarted localdns.service");
        } else {
            runner.run(&["systemctl", "start", "localdns.service"])?;
            exec.line(if was_on {
                "localdns.service running"
            } else {
                "started localdns.service"
            });
        }
        node::localdns_ready(config, exec.waits, exec.progress)?;
    }
    if t.kubelet {
        runner.run(&["systemctl", "restart", "kubelet.service"])?;
        crate::machine::machinectl::wait_unit_active(
            &runner,
            "kubelet.service",
            exec.waits.kubelet(),
            node::KUBELET_POLL,
        )?;
        exec.line("restarted kubelet.service");
    }
    // The daemon as the new config has it (unchanged: left running).
    exec.install_daemon()?;
    Ok(())
}

/// A new Corefile (its zones, template or upstreams): `systemctl reload-or-restart
/// localdns.service`, which returns once the new CoreDNS took over or was refused
/// (`supervisor::reload`); nothing that requires the unit restarts. A
/// refused one leaves the previous Corefile serving and the unit's status degraded, with
/// CoreDNS's reason, as `unbounded-agent status` reports it: said here as a warning, not an error
/// (the config is applied, as when the fallback serves at a start; fixing it is another apply).
fn reload_localdns(exec: &Executor, runner: &MachineRunner) -> Result<(), StartError> {
    // A unit that is down (failed, between automatic restarts) is started instead.
    runner.run(&[
        "systemctl",
        "reload-or-restart",
        crate::supervisor::restart_bridge::SERVICE_UNIT,
    ])?;
    let status = runner.status_text(crate::supervisor::restart_bridge::SERVICE_UNIT)?;
    if status.starts_with(crate::supervisor::notify::DEGRADED_PREFIX) {
        exec.line(&format!(
            "warning: localdns.service did not take the new Corefile: {status}"
        ));
    } else {
        exec.line(&format!("reloaded localdns.service: {status}"));
    }
    Ok(())
}

/// Removes a file or link the agent wrote (absent is fine), then its parent directory if that
/// became empty and is ours: a `*.d` drop-in directory, or one at or below the LocalDNS directory
/// (`/etc/unbounded/localdns`, on the host or in the machine whose rootfs is `rootfs`).
fn remove(root: &Path, rootfs: &Path, path: &Path) -> Result<(), StartError> {
    let at = under(root, path);
    let io = |source| StartError::Io {
        action: "remove",
        path: at.clone(),
        source,
    };
    let Some(found) = removable(root, rootfs, path).map_err(io)? else {
        return Ok(());
    };
    match std::fs::remove_file(&found.path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(io(source)),
    }
    let mut dir = path.parent();
    while let Some(d) = dir.filter(|d| ours(d, rootfs)) {
        let removed =
            removable(root, rootfs, d).is_ok_and(|f| f.is_some_and(|f| std::fs::remove_dir(&f.path).is_ok()));
        if !removed {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

/// A path to remove, held while it is removed.
struct Removable {
    path: PathBuf,
    _held: Option<Beneath>,
}

/// `path` below `root`; a machine's path (below `rootfs`) reached beneath the machine's root
/// (`files::beneath`), so a link in its tree never leads a removal onto the host, `None` when a
/// directory on its way is missing.
fn removable(root: &Path, rootfs: &Path, path: &Path) -> std::io::Result<Option<Removable>> {
    let Ok(inside) = path.strip_prefix(rootfs) else {
        return Ok(Some(Removable {
            path: under(root, path),
            _held: None,
        }));
    };
    let found = existing_beneath(&under(root, rootfs), &Path::new("/").join(inside))?;
    Ok(found.map(|b| Removable {
        path: b.path(),
        _held: Some(b),
    }))
}

/// A directory the agent may remove once it is empty.
fn ours(dir: &Path, rootfs: &Path) -> bool {
    let local = match dir.strip_prefix(rootfs) {
        Ok(inside) => Path::new("/").join(inside),
        Err(_) => dir.to_path_buf(),
    };
    local.extension().is_some_and(|e| e == "d") || local.starts_with(paths::LOCALDNS_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_localdns_own_unit_files_wait_for_its_units_to_stop() {
        let rootfs = Path::new("/var/lib/machines/kube1");
        for unit in [
            "localdns.service",
            "localdns-spare.service",
            "localdns-bridge.service",
            "localdns.slice",
        ] {
            assert!(
                is_localdns_unit_file(&rootfs.join("etc/systemd/system").join(unit), rootfs),
                "{unit}"
            );
        }
        for path in [
            "etc/systemd/system/kubelet.service.d/05-localdns.conf",
            "etc/systemd/system/containerd.service.d/05-localdns.conf",
            "etc/unbounded/localdns/Corefile",
            "usr/local/bin/coredns",
        ] {
            assert!(!is_localdns_unit_file(&rootfs.join(path), rootfs), "{path}");
        }
        assert!(!is_localdns_unit_file(
            Path::new("/etc/systemd/system/localdns.service"),
            rootfs
        ));
    }

    #[test]
    fn removing_the_last_localdns_file_removes_its_directories_in_the_machine_and_only_those() {
        let root = tempfile::tempdir().unwrap();
        let rootfs = Path::new("/var/lib/machines/kube1");
        let corefile = rootfs.join(paths::COREFILE.trim_start_matches('/'));
        let drop_in = rootfs.join(paths::KUBELET_DROP_IN.trim_start_matches('/'));
        let kept = rootfs.join("etc/unbounded/rootfs.sha256");
        for f in [&corefile, &drop_in, &kept] {
            crate::files::write_atomic(&under(root.path(), f), b"x", 0o644).unwrap();
        }
        remove(root.path(), rootfs, &corefile).unwrap();
        remove(root.path(), rootfs, &drop_in).unwrap();
        let exists = |p: &Path| under(root.path(), p).exists();
        assert!(!exists(&rootfs.join("etc/unbounded/localdns")));
        assert!(!exists(&rootfs.join("etc/systemd/system/kubelet.service.d")));
        assert!(exists(&kept), "a file that is not LocalDNS's was removed");
        assert!(
            exists(&rootfs.join("etc/systemd/system")),
            "a directory not ours was removed"
        );
        remove(root.path(), rootfs, &corefile).unwrap();
    }

    #[test]
    fn touched_paths_name_what_reloads_and_restarts() {
        let rootfs = Path::new("/var/lib/machines/kube1");
        let at = |p: &str| rootfs.join(p.trim_start_matches('/'));
        let t = touched(
            &[
                at(paths::COREFILE),
                at(paths::KUBELET_DROP_IN),
                PathBuf::from(paths::NETWORK_UNIT),
            ],
            rootfs,
        );
        assert_eq!(
            t,
            Touched {
                host_units: true,
                machine_units: true,
                localdns: true,
                reload_enough: true,
                kubelet: true
            }
        );
        assert_eq!(
            touched(&[at(paths::MACHINE_RESOLV_CONF)], rootfs),
            Touched::default()
        );
        let binary = touched(&[at(paths::COREDNS_BINARY)], rootfs);
        assert!(binary.localdns && !binary.machine_units && !binary.kubelet && !binary.reload_enough);
        let upstreams = touched(
            &[
                at(paths::COREFILE),
                at(paths::FALLBACK_COREFILE),
                at(paths::NODE_UPSTREAMS),
            ],
            rootfs,
        );
        assert!(
            upstreams.localdns && upstreams.reload_enough,
            "new upstreams are reloaded"
        );
        let environment = touched(&[at(paths::COREFILE), at(paths::ENVIRONMENT)], rootfs);
        assert!(
            environment.localdns && !environment.reload_enough,
            "the environment is read at a start"
        );
    }
}
