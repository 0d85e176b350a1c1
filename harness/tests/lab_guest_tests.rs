//! Runs the guest tests (binaries or tests named `guest_*`, see
//! `harness::guest_tests`) inside one lab VM on Debian's kernel, and checks
//! that the host's own run filters them out. Needs root, the host image
//! (`harness images build`) and cargo-nextest (`scripts/setup.sh`).

use std::process::Command;
use std::time::Duration;

use harness::guest_tests::{GUEST_FILTER, GuestTests};
use harness::lab::{Lab, LabSpec};
use harness::vm::{BootImage, Vm};

const SMOKE: &str = "binary_id(agent::guest_smoke)";

/// `cargo nextest list` of the workspace (as `cargo nextest run --workspace` builds it, so
/// nothing is rebuilt) narrowed to the agent's `guest_smoke` binary by `filter`.
fn list_guest_smoke(extra: &[&str]) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(harness::evidence::repo_root())
        .args(["nextest", "list", "--workspace", "--message-format", "oneline"])
        .args(extra);
    agent::exec::run_stdout(&mut cmd).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn host_runs_filter_out_guest_tests_instead_of_skipping_them() {
    let host = list_guest_smoke(&["-E", SMOKE]);
    assert!(
        !host.contains("guest_kernel_creates_a_dummy_link"),
        "the default filter let a guest test in:\n{host}"
    );
    let guest_filter = format!("{SMOKE} & ({GUEST_FILTER})");
    let guest = list_guest_smoke(&["--ignore-default-filter", "-E", &guest_filter]);
    assert!(
        guest.contains("guest_kernel_creates_a_dummy_link_in_a_fresh_namespace"),
        "the guest filter does not select the smoke test:\n{guest}"
    );
}

#[test]
fn agent_guest_tests_pass_inside_a_lab_vm_on_debians_kernel() {
    let test = harness::evidence::current_test_name();
    let cache = harness::cache::Cache::open().unwrap();
    let image = harness::images::host::require(&cache).unwrap_or_else(|e| panic!("{e:#}"));
    let tests = GuestTests::build(&["agent"]).unwrap_or_else(|e| panic!("{e}"));
    let lab = Lab::start(LabSpec::for_test(&test)).unwrap();
    let mut spec = lab.vm_spec("guests", BootImage::from(&image)).unwrap();
    spec.share = Some(tests.share().to_path_buf());
    let vm = Vm::boot(spec).unwrap_or_else(|e| panic!("{e}"));

    let timeout = vm.deadlines().boot.max(Duration::from_secs(600));
    // On failure the VM's guard saves its evidence next to the inner report.
    let report = tests.run(&vm, &test, timeout).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        report
            .output
            .contains("guest_kernel_creates_a_dummy_link_in_a_fresh_namespace"),
        "the smoke guest test did not run in the guest:\n{}",
        report.output
    );
    assert!(report.dir.join("junit.xml").is_file());
    vm.shutdown().unwrap();
    lab.shutdown().unwrap();
}
