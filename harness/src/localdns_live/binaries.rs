//! Where a live LocalDNS finds its programs: the real CoreDNS (in a guest, the copy the runner
//! handed over; on this host, the lab cache's artifact, see `crate::images::coredns::require`) and
//! `unbounded-localdns-supervisor` (cargo's build, beside the running program).

use std::path::PathBuf;

use super::error::LiveError;

/// The environment variable naming the real CoreDNS in the guest (set by the host-side runner,
/// `harness/tests/lab_guest_tests.rs`, which copies the binary from the lab cache into the VM).
pub const COREDNS_ENV: &str = "LOCALDNS_TEST_COREDNS";

/// The supervisor's binary name, as cargo builds it (`agent/src/bin/`).
pub const SUPERVISOR_BINARY: &str = "unbounded-localdns-supervisor";

pub(crate) const RUN_IN_A_VM: &str = "these guest tests run inside a lab VM: \
    `cargo nextest run -p harness --test lab_guest_tests` (after `harness images build`)";

/// The real CoreDNS the runner copied into the VM (`$LOCALDNS_TEST_COREDNS`).
pub fn guest_coredns() -> Result<PathBuf, LiveError> {
    let path = std::env::var_os(COREDNS_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| LiveError::NotInAGuest {
            what: format!("{COREDNS_ENV} is not set"),
        })?;
    if !path.is_file() {
        return Err(LiveError::NotInAGuest {
            what: format!("{COREDNS_ENV}={} is missing", path.display()),
        });
    }
    Ok(path)
}

/// `unbounded-localdns-supervisor` beside the running program: in its directory (the `harness`
/// binary in `<target>/debug/`) or the one above (a test in `<target>/debug/deps/`, also in the
/// guest's test archive, which holds the workspace's binaries).
pub fn supervisor_binary() -> Result<PathBuf, LiveError> {
    let exe = std::env::current_exe().map_err(super::error::io_err("finding", "this executable"))?;
    let looked: Vec<PathBuf> = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(SUPERVISOR_BINARY))
        .collect();
    looked
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or(LiveError::MissingSupervisor { looked })
}
