//! Runs every guest test (test binaries named `guest_*`, see `harness::guest_tests`) of the agent
//! and the harness inside ONE lab VM on Debian's kernel, and checks that the host's own run filters
//! them out. Needs root, the host image, the CoreDNS artifact and the machine rootfs
//! (`harness images build`; the last two are handed to the guest tests) and cargo-nextest
//! (`scripts/setup.sh`).

use std::process::Command;
use std::time::Duration;

use harness::guest_tests::{GUEST_FILTER, GuestTests};
use harness::images;
use harness::lab::{Lab, LabSpec};
// Where the guest tests find the real CoreDNS.
use harness::localdns_live::COREDNS_ENV;
use harness::vm::{BootImage, Vm};

const SMOKE: &str = "binary_id(agent::guest_smoke)";
/// The guest test binaries that must run in the VM (a missing one fails the run).
const GUEST_BINARIES: [&str; 5] = [
    "agent::guest_smoke",
    "agent::guest_hostnet",
    "agent::guest_start_hostile_rootfs",
    "harness::guest_localdns_live",
    "harness::guest_localdns_notrack",
];
/// Where the guest tests find the nspawn machine rootfs tarball (`agent/tests/guest_start_machine.rs`).
const ROOTFS_ENV: &str = "UNBOUNDED_TEST_ROOTFS";

/// `cargo nextest list` of the workspace (as `cargo nextest run --workspace` builds it, so
/// nothing is rebuilt) narrowed by `extra`'s filter.
fn list_guests(extra: &[&str]) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(harness::repo::root())
        .args(["nextest", "list", "--workspace", "--message-format", "oneline"])
        .args(extra);
    agent::exec::run_stdout(&mut cmd).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn host_runs_filter_out_guest_tests_instead_of_skipping_them() {
    // The agent's smoke test and the harness's LocalDNS guest binaries: two lists, one build.
    let ours = format!(
        "{SMOKE} | binary_id(harness::guest_localdns_live) | binary_id(harness::guest_localdns_notrack)"
    );
    let host = list_guests(&["-E", &ours]);
    assert!(
        !host.contains("guest_kernel_creates_a_dummy_link") && !host.contains("guest_localdns"),
        "the default filter let a guest test in:\n{host}"
    );
    let guest_filter = format!("({ours}) & ({GUEST_FILTER})");
    let guest = list_guests(&["--ignore-default-filter", "-E", &guest_filter]);
    for wanted in [
        "guest_kernel_creates_a_dummy_link_in_a_fresh_namespace",
        "harness::guest_localdns_live",
        "harness::guest_localdns_notrack",
    ] {
        assert!(
            guest.contains(wanted),
            "the guest filter does not select {wanted}:\n{guest}"
        );
    }
}

#[test]
fn agent_and_harness_guest_tests_pass_inside_one_lab_vm_on_debians_kernel() {
    let test = harness::vm::evidence::current_test_name();
    let cache = harness::cache::Cache::open().unwrap();
    let image = images::host::require(&cache).unwrap_or_else(|e| panic!("{}", agent::error_chain::Chain(&e)));
    let coredns =
        images::coredns::require(&cache).unwrap_or_else(|e| panic!("{}", agent::error_chain::Chain(&e)));
    let mut tests = GuestTests::build(&["agent", "harness"]).unwrap_or_else(|e| panic!("{e}"));
    let rootfs =
        images::rootfs::require(&cache).unwrap_or_else(|e| panic!("{}", agent::error_chain::Chain(&e)));
    tests
        .add_file(&coredns.binary, "coredns", COREDNS_ENV)
        .unwrap_or_else(|e| panic!("{e}"));
    tests
        .add_file(&rootfs.tarball, "rootfs.tar.gz", ROOTFS_ENV)
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
