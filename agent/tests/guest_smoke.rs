//! A guest test: it needs Debian's kernel and runs inside a lab VM (see
//! `harness::guest_tests`; binaries named `guest_*` are excluded from the host's
//! run by `.config/nextest.toml`'s default filter). It creates a dummy link,
//! which this host's kernel cannot do, so it proves the filter keeps it off
//! the host and the runner really runs it in the guest. Needs root.

use std::process::Command;

use agent::exec;

/// Deletes the namespace when the test ends, however it ends.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = exec::run(Command::new("ip").args(["netns", "del", &self.0]));
    }
}

#[test]
fn guest_kernel_creates_a_dummy_link_in_a_fresh_namespace() {
    let ns = Netns(format!("guest-smoke-{}", std::process::id()));
    exec::run(Command::new("ip").args(["netns", "add", &ns.0])).unwrap();
    exec::run(Command::new("ip").args(["-n", &ns.0, "link", "add", "smoke0", "type", "dummy"]))
        .unwrap_or_else(|e| panic!("this kernel has no dummy link type (run it in a lab VM): {e}"));
    let shown =
        exec::run_stdout(Command::new("ip").args(["-n", &ns.0, "-d", "link", "show", "smoke0"])).unwrap();
    assert!(shown.contains("dummy"), "{shown}");
}
