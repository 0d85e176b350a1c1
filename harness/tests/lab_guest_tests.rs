//! Runs every guest test (test binaries named `guest_*`, see `harness::guest_tests`) of the agent
//! and the harness inside ONE lab VM on Debian's kernel, and checks that the host's own run filters
//! them out. Needs root, the host image and the CoreDNS artifact (`harness images build`) and
//! cargo-nextest (`scripts/setup.sh`).

use std::process::Command;
use std::time::Duration;

use harness::guest_tests::{GUEST_FILTER, GuestTests};
use harness::images;
use harness::lab::{Lab, LabSpec};
use harness::vm::{BootImage, Vm};

const SMOKE: &str = "binary_id(agent::guest_smoke)";
/// The guest test binaries that must run in the VM (a missing one fails the run).
const GUEST_BINARIES: [&str; 4] = [
    "agent::guest_smoke",
    "agent::guest_hostnet",
    "harness::guest_localdns_live",
    "harness::guest_localdns_notrack",
];
/// Where the guest tests find the real CoreDNS (`localdns_live_support::COREDNS_ENV`).
const COREDNS_ENV: &str = "LOCALDNS_TEST_COREDNS";

/// `cargo nextest list` of the workspace (as `cargo nextest run --workspace` builds it, so
/// nothing is rebuilt) narrowed by `extra`'s filter.
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
    let live = "binary_id(harness::guest_localdns_live) | binary_id(harness::guest_localdns_notrack)";
    let host = list_guest_smoke(&["-E", live]);
    assert!(
        !host.contains("guest_localdns"),
        "the default filter let a LocalDNS guest test in:\n{host}"
    );
    let guest = list_guest_smoke(&[
        "--ignore-default-filter",
        "-E",
        &format!("({live}) & ({GUEST_FILTER})"),
    ]);
    assert!(
        guest.contains("harness::guest_localdns_live") && guest.contains("harness::guest_localdns_notrack"),
        "the guest filter does not select the LocalDNS guest tests:\n{guest}"
    );
}

#[test]
fn agent_and_harness_guest_tests_pass_inside_one_lab_vm_on_debians_kernel() {
    let test = harness::evidence::current_test_name();
    let cache = harness::cache::Cache::open().unwrap();
    let image = images::host::require(&cache).unwrap_or_else(|e| panic!("{e:#}"));
    let coredns = images::coredns::require(&cache).unwrap_or_else(|e| panic!("{e:#}"));
    let mut tests = GuestTests::build(&["agent", "harness"]).unwrap_or_else(|e| panic!("{e}"));
    tests
        .add_file(&coredns.binary, "coredns", COREDNS_ENV)
        .unwrap_or_else(|e| panic!("{e}"));
    let lab = Lab::start(LabSpec::for_test(&test)).unwrap();
    let mut spec = lab.vm_spec("guests", BootImage::from(&image)).unwrap();
    spec.share = Some(tests.share().to_path_buf());
    let vm = Vm::boot(spec).unwrap_or_else(|e| panic!("{e}"));

    let timeout = vm.deadlines().boot.max(Duration::from_secs(1200));
    // On failure the VM's guard saves its evidence next to the inner report.
    let report = tests.run(&vm, &test, timeout).unwrap_or_else(|e| panic!("{e}"));
    for binary in GUEST_BINARIES {
        assert!(
            report.output.contains(binary),
            "the guest test binary {binary} did not run in the guest:\n{}",
            report.output
        );
    }
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
