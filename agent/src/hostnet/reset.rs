//! Reset: remove everything LocalDNS put on the host, keep going past errors, report all of it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::exec::{self, CommandFailed};
use crate::names::Slot;

use super::link::Netlink;
use super::plan::check_dummy;
use super::{LINK_NAME, TABLE_FAMILY, TABLE_NAME, nft};

/// The boot-time unit that recreates link and table.
pub use crate::paths::NETWORK_UNIT_NAME as NETWORK_UNIT;
use crate::paths::{UPSTREAMS_PATH_UNIT_NAME, UPSTREAMS_SERVICE_NAME};

/// The host units of LocalDNS, stopped, disabled and removed in this order: the path unit first
/// (nothing then starts the refresh), the refresh, the network unit.
const UNITS: [&str; 3] = [UPSTREAMS_PATH_UNIT_NAME, UPSTREAMS_SERVICE_NAME, NETWORK_UNIT];

/// Where our files live, below a root (`/` on a real host, a temporary directory in tests).
#[derive(Debug, Clone)]
pub struct ResetPaths {
    pub root: PathBuf,
}

impl ResetPaths {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ResetPaths { root: root.into() }
    }

    fn at(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    pub fn unit_dir(&self) -> PathBuf {
        self.at("/etc/systemd/system")
    }

    pub fn network_unit(&self) -> PathBuf {
        self.at(crate::paths::NETWORK_UNIT)
    }

    /// The unit files of [`UNITS`], in their order.
    pub fn unit_files(&self) -> [PathBuf; 3] {
        UNITS.map(|unit| self.unit_dir().join(unit))
    }

    pub fn nft_script(&self) -> PathBuf {
        self.at(crate::paths::NFT_SCRIPT)
    }

    pub fn nspawn_dropin(&self, slot: Slot) -> PathBuf {
        self.at(&crate::paths::nspawn_drop_in(slot))
    }

    fn is_live_root(&self) -> bool {
        self.root == Path::new("/")
    }
}

/// What reset did: each entry names a piece of host state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetReport {
    pub removed: Vec<String>,
    pub already_absent: Vec<String>,
    /// What could not be removed, with why.
    pub failed: Vec<(String, String)>,
}

impl ResetReport {
    pub fn is_clean(&self) -> bool {
        self.failed.is_empty()
    }
}

impl fmt::Display for ResetReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for item in &self.removed {
            writeln!(f, "removed: {item}")?;
        }
        for item in &self.already_absent {
            writeln!(f, "already absent: {item}")?;
        }
        for (item, why) in &self.failed {
            writeln!(f, "FAILED: {item}: {why}")?;
        }
        Ok(())
    }
}

fn systemd_is_running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// systemctl's words for a unit that is not there.
fn unit_is_unknown(err: &CommandFailed) -> bool {
    let stderr = err.stderr();
    ["not loaded", "does not exist", "not found"]
        .iter()
        .any(|w| stderr.contains(w))
}

fn systemctl(report: &mut ResetReport, verb: &str, unit: &str, what: String) {
    match exec::run(Command::new("systemctl").args([verb, unit])) {
        Ok(_) => report.removed.push(what),
        Err(err) if unit_is_unknown(&err) => report.already_absent.push(what),
        Err(err) => report.failed.push((what, format!("{err:#}"))),
    }
}

fn stop_and_disable(paths: &ResetPaths, report: &mut ResetReport) {
    if paths.is_live_root() && systemd_is_running() {
        for unit in UNITS {
            systemctl(report, "stop", unit, format!("running unit {unit}"));
            systemctl(report, "disable", unit, format!("enablement of {unit}"));
            // A failed run (the refresh's) would stay listed once the file is gone; nothing to
            // report when there is none.
            let _ = exec::run(Command::new("systemctl").args(["reset-failed", unit]));
        }
    }
    // What `systemctl disable` removes, also when systemd is not running (or below a test root).
    let Ok(entries) = std::fs::read_dir(paths.unit_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".wants") || name.ends_with(".requires") {
            for unit in UNITS {
                remove_file(report, &dir.join(unit), false);
            }
        }
    }
}

fn delete_table(report: &mut ResetReport) {
    let what = format!("nft table {TABLE_FAMILY} {TABLE_NAME}");
    match nft::delete_table() {
        Ok(true) => report.removed.push(what),
        Ok(false) => report.already_absent.push(what),
        Err(err) => report.failed.push((what, crate::error_chain::chain(&err))),
    }
}

fn delete_link(report: &mut ResetReport) {
    let what = format!("dummy link {LINK_NAME}");
    let result = Netlink::open().and_then(|nl| {
        let Some(link) = nl.observe(LINK_NAME)? else {
            return Ok(None);
        };
        if let Err(foreign) = check_dummy(&link) {
            return Ok(Some(Err(foreign)));
        }
        nl.delete(link.index)?;
        Ok(Some(Ok(())))
    });
    match result {
        Ok(None) => report.already_absent.push(what),
        Ok(Some(Ok(()))) => report.removed.push(what),
        Ok(Some(Err(foreign))) => report.failed.push((what, foreign.to_string())),
        Err(err) => report.failed.push((what, crate::error_chain::chain(&err))),
    }
}

/// Removes a file; absent files are reported only when `report_absent`.
fn remove_file(report: &mut ResetReport, path: &Path, report_absent: bool) {
    let what = path.display().to_string();
    match std::fs::remove_file(path) {
        Ok(()) => report.removed.push(what),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if report_absent {
                report.already_absent.push(what)
            }
        }
        Err(err) => report.failed.push((what, err.to_string())),
    }
}

/// Removes the host units (the network unit, the upstreams' path unit and refresh; stopped and
/// disabled first), our nft table, the `localdns` dummy link
/// (a non-dummy one is refused and left), the unit file, the nft script and the nspawn drop-ins.
/// Never stops at the first error.
pub fn reset(paths: &ResetPaths) -> ResetReport {
    let mut report = ResetReport::default();
    stop_and_disable(paths, &mut report);
    delete_table(&mut report);
    delete_link(&mut report);
    for unit_file in paths.unit_files() {
        remove_file(&mut report, &unit_file, true);
    }
    remove_file(&mut report, &paths.nft_script(), true);
    for slot in Slot::ALL {
        let dropin = paths.nspawn_dropin(slot);
        remove_file(&mut report, &dropin, true);
        if let Some(dir) = dropin.parent() {
            // Only if empty: other drop-ins (override.conf) stay.
            let _ = std::fs::remove_dir(dir);
        }
    }
    if paths.is_live_root()
        && systemd_is_running()
        && let Err(err) = exec::run(Command::new("systemctl").arg("daemon-reload"))
    {
        report
            .failed
            .push(("systemctl daemon-reload".into(), format!("{err:#}")));
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_below_the_root() {
        let paths = ResetPaths::new("/tmp/x");
        assert_eq!(
            paths.network_unit(),
            Path::new("/tmp/x/etc/systemd/system/unbounded-localdns-network.service")
        );
        assert_eq!(
            paths.nft_script(),
            Path::new("/tmp/x/etc/unbounded/localdns/localdns.nft")
        );
        assert_eq!(
            paths.nspawn_dropin(Slot::Kube2),
            Path::new("/tmp/x/etc/systemd/system/systemd-nspawn@kube2.service.d/10-localdns.conf")
        );
    }

    #[test]
    fn systemctl_unknown_unit_messages_count_as_absent() {
        let err = exec::run(Command::new("sh").args([
            "-c",
            "echo 'Failed to stop x.service: Unit x.service not loaded.' >&2; exit 5",
        ]))
        .unwrap_err();
        assert!(unit_is_unknown(&err));
        let other =
            exec::run(Command::new("sh").args(["-c", "echo 'Access denied' >&2; exit 1"])).unwrap_err();
        assert!(!unit_is_unknown(&other));
    }
}
