//! The KVM probe with the real QEMU: it passes where the accelerator works (TCG, forced), and on
//! this host the choice without `LAB_ACCEL` is the one the probe gives.

use std::path::Path;

use harness::vm::accel::Accel;
use harness::vm::accel_probe::{self, DEADLINE, ProbeOutcome};
use harness::vm::qemu::QEMU;

#[test]
fn the_probe_firmware_boots_and_exits_under_tcg() {
    assert_eq!(
        accel_probe::probe(Path::new(QEMU), Accel::Tcg, DEADLINE),
        ProbeOutcome::Works,
        "the probe must pass where the accelerator works ({QEMU}; scripts/setup.sh installs it)"
    );
}

#[test]
fn without_lab_accel_the_probe_decides_where_dev_kvm_opens() {
    let opens = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    let outcome = accel_probe::probe(Path::new(QEMU), Accel::Kvm, DEADLINE);
    let expected = if opens {
        accel_probe::accel_for(&outcome)
    } else {
        Accel::Tcg
    };
    if let ProbeOutcome::Fails(why) = &outcome {
        assert!(why.starts_with("QEMU") || why.starts_with("no answer"), "{why}");
    }
    assert_eq!(Accel::detect(), expected, "probe on this host: {outcome:?}");
}
