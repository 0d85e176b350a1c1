//! `reset`: everything of the agent's removed from the host — both slots' machines (stopped,
//! disabled, terminated), rootfs, `.nspawn` files and unit drop-ins, the LocalDNS host network
//! (link, table, unit, script), what the node's processes left in the shared network namespace
//! (the CNI bridge, the `KUBE-*`/`CNI-*` nft chains), the kernel settings files, the install and
//! repave records and the applied configs, the agent daemon's unit and credentials and the config
//! it last handed to `apply` — then `daemon-reload`. It keeps going past errors and reports everything it
//! could not remove; a second reset finds nothing to do. `--dry-run` lists what it would remove.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::error::LifecycleError;
use super::progress::Progress;
use super::{Outcome, repave_state, state};
use crate::exec;
use crate::files::under;
use crate::hostnet::{self, ResetPaths, ResetReport};
use crate::machine::machinectl;
use crate::names::Slot;
use crate::paths::DAEMON_UNIT_NAME;
use crate::render::host_prep::{MODULES_FILE, SYSCTL_FILE};
use crate::render::nspawn;
use crate::start::daemon_unit;
use crate::start::node::applied_paths;

/// Directories removed when they are left empty, deepest first.
const EMPTY_DIRS: [&str; 9] = crate::paths::EMPTY_DIRS_AFTER_RESET;

fn live(root: &Path) -> bool {
    root == Path::new("/") && Path::new("/run/systemd/system").is_dir()
}

/// The files of `slot` on the host (below `root`), besides its rootfs.
fn slot_files(root: &Path, slot: Slot) -> Vec<PathBuf> {
    let (applied, sidecar) = applied_paths(root, slot);
    vec![
        under(root, Path::new(&nspawn::nspawn_path(slot))),
        under(root, Path::new(&nspawn::override_path(slot))),
        under(root, Path::new(&crate::paths::nspawn_drop_in(slot))),
        under(root, Path::new(&crate::paths::machine_enablement_link(slot))),
        applied,
        sidecar,
    ]
}

fn host_files(root: &Path) -> Vec<PathBuf> {
    [
        SYSCTL_FILE,
        MODULES_FILE,
        state::PATH,
        repave_state::PATH,
        crate::paths::DESIRED_CONFIG,
    ]
    .iter()
    .map(|p| under(root, Path::new(p)))
    .collect()
}

fn remove_path(report: &mut ResetReport, path: &Path) {
    let what = path.display().to_string();
    let result = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    };
    match result {
        Ok(()) => report.removed.push(what),
        Err(e) => report.failed.push((what, e.to_string())),
    }
}

/// Mount points at or below `dir` (from `/proc/self/mountinfo`), deepest first.
fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found
}

fn run_logged(report: &mut ResetReport, what: String, cmd: &mut Command) {
    match exec::run(cmd) {
        Ok(_) => report.removed.push(what),
        Err(e) => report.failed.push((what, format!("{e:#}"))),
    }
}

/// Stops and removes one slot: its machine, rootfs, settings, drop-ins and applied config.
pub fn remove_slot(root: &Path, slot: Slot) -> ResetReport {
    let mut report = ResetReport::default();
    let m = slot.as_str();
    if live(root) {
        match machinectl::is_running(m) {
            Ok(true) => run_logged(
                &mut report,
                format!("running machine {m}"),
                Command::new("systemctl").args(["stop", &machinectl::nspawn_unit(m)]),
            ),
            Ok(false) => {}
            Err(e) => report.failed.push((format!("machine {m}"), format!("{e:#}"))),
        }
        let registered = exec::run(Command::new("machinectl").args(["show", m])).is_ok();
        if registered {
            run_logged(
                &mut report,
                format!("machine registration {m}"),
                Command::new("machinectl").args(["terminate", m]),
            );
        }
        for mount in mounts_below(&Path::new("/run/unbounded/bpffs").join(m))
            .into_iter()
            .chain(mounts_below(&slot.rootfs()))
        {
            run_logged(
                &mut report,
                format!("mount {}", mount.display()),
                Command::new("umount").arg(&mount),
            );
        }
        remove_path(&mut report, &Path::new("/run/unbounded/bpffs").join(m));
    }
    for file in slot_files(root, slot) {
        remove_path(&mut report, &file);
        if let Some(dir) = file.parent()
            && dir.extension().is_some_and(|e| e == "d")
        {
            let _ = std::fs::remove_dir(dir);
        }
    }
    remove_path(&mut report, &under(root, &slot.rootfs()));
    report
}

/// The agent daemon: its unit stopped and disabled — only disabled when this reset is the
/// daemon's own (an `AgentReset`): the unit ends with it — and its files removed.
fn remove_daemon(root: &Path, report: &mut ResetReport) {
    let paths = daemon_unit::host_paths(root);
    if live(root) && paths.iter().any(|p| p.symlink_metadata().is_ok()) {
        let (args, what): (&[&str], &str) = if daemon_unit::running_inside_unit() {
            (
                &["disable", DAEMON_UNIT_NAME],
                "disabled; it ends with this daemon",
            )
        } else {
            (&["disable", "--now", DAEMON_UNIT_NAME], "stopped and disabled")
        };
        run_logged(
            report,
            format!("unit {DAEMON_UNIT_NAME} ({what})"),
            Command::new("systemctl").args(args),
        );
    }
    for path in paths {
        remove_path(report, &path);
    }
}

/// What a reset would remove now (for `--dry-run`).
pub fn plan(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for slot in Slot::ALL {
        if live(root) && machinectl::is_running(slot.as_str()).unwrap_or(false) {
            out.push(format!("stop machine {slot}"));
        }
        let rootfs = under(root, &slot.rootfs());
        if rootfs.exists() {
            out.push(format!("remove {}", rootfs.display()));
        }
        for f in slot_files(root, slot) {
            if f.symlink_metadata().is_ok() {
                out.push(format!("remove {}", f.display()));
            }
        }
    }
    for f in daemon_unit::host_paths(root) {
        if f.symlink_metadata().is_ok() {
            out.push(format!("remove {}", f.display()));
        }
    }
    let paths = ResetPaths::new(root);
    for f in [paths.network_unit(), paths.nft_script()] {
        if f.exists() {
            out.push(format!("remove {}", f.display()));
        }
    }
    if live(root) {
        if hostnet::nft::table_exists().unwrap_or(true) {
            out.push(format!(
                "delete nft table {} {} (if present)",
                hostnet::TABLE_FAMILY,
                hostnet::TABLE_NAME
            ));
        }
        if Path::new("/sys/class/net").join(hostnet::LINK_NAME).exists() {
            out.push(format!("delete link {}", hostnet::LINK_NAME));
        }
        out.extend(hostnet::node_leftovers::plan());
    }
    for f in host_files(root) {
        if f.exists() {
            out.push(format!("remove {}", f.display()));
        }
    }
    out
}

/// Removes everything; `Err` lists what could not be removed.
pub fn reset(root: &Path) -> ResetReport {
    let mut report = ResetReport::default();
    for slot in Slot::ALL {
        let r = remove_slot(root, slot);
        report.removed.extend(r.removed);
        report.failed.extend(r.failed);
    }
    remove_daemon(root, &mut report);
    let net = hostnet::reset(&ResetPaths::new(root));
    report.removed.extend(net.removed);
    report.failed.extend(net.failed);
    if live(root) {
        hostnet::node_leftovers::remove(&mut report);
    }
    for f in host_files(root) {
        remove_path(&mut report, &f);
    }
    for dir in EMPTY_DIRS {
        let _ = std::fs::remove_dir(under(root, Path::new(dir)));
    }
    if live(root)
        && let Err(e) = exec::run(Command::new("systemctl").arg("daemon-reload"))
    {
        report
            .failed
            .push(("systemctl daemon-reload".into(), format!("{e:#}")));
    }
    report
}

/// `unbounded-agent reset [--dry-run]`.
pub fn run(root: &Path, dry_run: bool, progress: &dyn Progress) -> Result<Outcome, LifecycleError> {
    if dry_run {
        let planned = plan(root);
        for line in &planned {
            progress.line(&format!("reset (dry run): would {line}"));
        }
        if planned.is_empty() {
            progress.line("reset (dry run): nothing of the agent's is on this host");
        }
        return Ok(Outcome::ResetPlan(planned));
    }
    let report = reset(root);
    for item in &report.removed {
        progress.line(&format!("reset: removed {item}"));
    }
    if report.removed.is_empty() && report.failed.is_empty() {
        progress.line("reset: nothing of the agent's was on this host");
    }
    if !report.is_clean() {
        return Err(LifecycleError::ResetIncomplete {
            report: report
                .failed
                .iter()
                .map(|(what, why)| format!("could not remove {what}: {why}"))
                .collect::<Vec<_>>()
                .join("\n"),
        });
    }
    Ok(Outcome::Reset(report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, path: &str) {
        let p = under(root, Path::new(path));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "x").unwrap();
    }

    #[test]
    fn reset_below_a_root_removes_both_slots_and_records_and_keeps_the_users_config() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for p in [
            "/var/lib/machines/kube1/etc/os-release",
            "/var/lib/machines/kube2/usr/local/bin/kubelet",
            "/etc/systemd/nspawn/kube1.nspawn",
            "/etc/systemd/system/systemd-nspawn@kube1.service.d/override.conf",
            "/etc/systemd/system/systemd-nspawn@kube1.service.d/10-localdns.conf",
            "/etc/unbounded/agent/kube1-applied-config.json",
            "/etc/unbounded/agent/kube1-applied-config.json.sha256",
            "/etc/unbounded/agent/repave-state.json",
            "/etc/unbounded/agent/config.json",
            "/etc/unbounded/localdns/localdns.nft",
            "/etc/sysctl.d/90-unbounded-agent.conf",
            "/var/lib/unbounded/agent/install-state.json",
            "/etc/systemd/system/unbounded-agent-daemon.service",
            "/etc/systemd/system/multi-user.target.wants/unbounded-agent-daemon.service",
            "/etc/unbounded/agent/daemon/kubeconfig",
            "/etc/unbounded/agent/daemon/token",
            "/etc/unbounded/agent/desired-config.json",
        ] {
            touch(root, p);
        }
        let planned = plan(root);
        for wanted in [
            "var/lib/machines/kube2",
            "unbounded-agent-daemon.service",
            "etc/unbounded/agent/daemon",
        ] {
            assert!(
                planned.iter().any(|l| l.ends_with(wanted)),
                "{wanted}: {planned:?}"
            );
        }
        let report = reset(root);
        // Table and link deletion act on this host's kernel, whatever the root: a build host
        // without them reports them absent, and fails nothing.
        assert!(report.is_clean(), "{report}");
        let mut left: Vec<String> = walk(root);
        left.sort();
        assert_eq!(
            left,
            [
                "etc",
                "etc/sysctl.d",
                "etc/systemd",
                "etc/systemd/system",
                "etc/systemd/system/multi-user.target.wants",
                "etc/unbounded",
                "etc/unbounded/agent",
                "etc/unbounded/agent/config.json",
                "var",
                "var/lib",
                "var/lib/machines",
            ]
        );
        assert!(plan(root).is_empty(), "{:?}", plan(root));
        let again = reset(root);
        assert!(again.removed.is_empty() && again.is_clean(), "{again}");
    }

    fn walk(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                out.push(p.strip_prefix(root).unwrap().display().to_string());
                if p.is_dir() && !p.is_symlink() {
                    stack.push(p);
                }
            }
        }
        out
    }
}
