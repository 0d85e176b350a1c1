//! What the guest tests share: they change the host (modules, sysctls, units, links), so they run
//! as root on a systemd host, a lab VM (`harness/tests/lab_guest_tests.rs`), never on the build
//! host.

/// Panics, saying how to run them, unless this is root on a host booted with systemd.
pub fn require_root_on_systemd() {
    assert!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0
            && std::path::Path::new("/run/systemd/system").is_dir(),
        "guest tests run as root on a systemd host: run them in a lab VM with \
         `cargo nextest run -p harness --test lab_guest_tests`"
    );
}
