//! Whether KVM really works here: a short probe boot with the lab's own KVM arguments and a
//! deadline, its answer kept for the rest of the host's boot.
//!
//! Where `/dev/kvm` opens, QEMU runs a 64 KiB firmware of three instructions (write 0x2a to the
//! `isa-debug-exit` port, halt) with the machine type, `-cpu host` and vCPU count the lab's VMs
//! use. Working KVM exits with status 85 (`0x2a << 1 | 1`) in well under a second. A KVM that
//! QEMU cannot set up (a nested host that refuses the host CPU's MSRs: QEMU aborts) or whose
//! vCPUs never run (a nested host that hangs) fails the probe, and the lab uses TCG, saying so
//! in one line. The probe does not catch a KVM that hangs later in a real boot; `LAB_ACCEL=tcg`
//! is the way out there.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::accel::Accel;

/// How long the probe may take: working KVM needs well under a second.
pub const DEADLINE: Duration = Duration::from_secs(10);
/// The status QEMU exits with when the firmware wrote 0x2a to the debug-exit port.
const EXIT_STATUS: i32 = (0x2a << 1) | 1;
/// The debug-exit port the firmware writes to.
const DEBUG_EXIT_PORT: u8 = 0xf4;
/// Where the answer is kept for the rest of the host's boot (a tmpfs: a reboot forgets it).
const ANSWER_DIR: &str = "/run/unbounded-lab";

/// What the probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The firmware ran and exited through the debug port.
    Works,
    /// QEMU failed, exited otherwise or did not finish in time: why, in one line.
    Fails(String),
}

/// The probe's firmware: 64 KiB of `hlt`, with `mov al, 0x2a; out 0xf4, al; hlt; jmp $-1` at the
/// reset vector (offset 0xfff0, where a PC starts in real mode).
pub fn firmware() -> Vec<u8> {
    let mut image = vec![0xf4; 64 * 1024];
    let code = [0xb0, 0x2a, 0xe6, DEBUG_EXIT_PORT, 0xf4, 0xeb, 0xfd];
    image[0xfff0..0xfff0 + code.len()].copy_from_slice(&code);
    image
}

/// Runs the probe with `qemu` under `accel`: `Works` when QEMU exits with the firmware's status
/// within `deadline`, else why not.
pub fn probe(qemu: &Path, accel: Accel, deadline: Duration) -> ProbeOutcome {
    match run_probe(qemu, accel, deadline) {
        Ok(()) => ProbeOutcome::Works,
        Err(why) => ProbeOutcome::Fails(why),
    }
}

fn run_probe(qemu: &Path, accel: Accel, deadline: Duration) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("a directory for the probe: {e}"))?;
    let bios = dir.path().join("probe-firmware.bin");
    std::fs::write(&bios, firmware()).map_err(|e| format!("writing {}: {e}", bios.display()))?;
    let mut command = Command::new(qemu);
    command
        .args(["-nodefaults", "-display", "none", "-no-reboot", "-machine", "pc"])
        .args(accel.qemu_args())
        .args([
            "-smp",
            &super::spec::DEFAULT_CPUS.to_string(),
            "-m",
            "64",
            "-bios",
        ])
        .arg(&bios)
        .args([
            "-device",
            &format!("isa-debug-exit,iobase={DEBUG_EXIT_PORT:#x},iosize=0x04"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|e| format!("starting {}: {e}", qemu.display()))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                if status.code() == Some(EXIT_STATUS) {
                    return Ok(());
                }
                let said = stderr
                    .lines()
                    .filter(|l| !l.contains("warning:"))
                    .map(str::trim)
                    .find(|l| !l.is_empty())
                    .unwrap_or("nothing on stderr");
                return Err(format!("QEMU {status}: {said}"));
            }
            Ok(None) if started.elapsed() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer in {} s (QEMU killed)", deadline.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for QEMU: {e}")),
        }
    }
}

/// The accelerator for this host when `/dev/kvm` opens: KVM if the probe works, else TCG. The
/// answer is kept in `/run` for the rest of the boot, so only the first caller probes (and
/// prints one line when KVM fails).
pub fn decide_with_kvm_device() -> Accel {
    let answer_file = answer_path();
    if let Some(accel) = answer_file.as_deref().and_then(read_answer) {
        return accel;
    }
    let outcome = probe(Path::new(super::qemu::QEMU), Accel::Kvm, DEADLINE);
    let accel = accel_for(&outcome);
    if let ProbeOutcome::Fails(why) = &outcome {
        eprintln!("==> KVM does not work here ({why}): the lab VMs use TCG (LAB_ACCEL=kvm|tcg chooses)");
    }
    if let Some(path) = answer_file {
        let _ = std::fs::create_dir_all(ANSWER_DIR);
        let _ = std::fs::write(&path, format!("{accel}\n"));
    }
    accel
}

/// KVM when the probe worked, TCG otherwise.
pub fn accel_for(outcome: &ProbeOutcome) -> Accel {
    match outcome {
        ProbeOutcome::Works => Accel::Kvm,
        ProbeOutcome::Fails(_) => Accel::Tcg,
    }
}

/// `/run/unbounded-lab/kvm-probe-<boot id>`: one answer per boot of the host.
fn answer_path() -> Option<PathBuf> {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(Path::new(ANSWER_DIR).join(format!("kvm-probe-{}", boot_id.trim())))
}

fn read_answer(path: &Path) -> Option<Accel> {
    Accel::parse(std::fs::read_to_string(path).ok()?.trim()).ok()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_firmware_starts_at_the_reset_vector_and_writes_to_the_debug_port() {
        let image = firmware();
        assert_eq!(image.len(), 65536);
        assert_eq!(&image[0xfff0..0xfff4], &[0xb0, 0x2a, 0xe6, 0xf4]);
    }

    #[test]
    fn a_probe_that_fails_or_hangs_means_tcg_and_one_that_works_kvm() {
        assert_eq!(accel_for(&ProbeOutcome::Works), Accel::Kvm);
        assert_eq!(accel_for(&ProbeOutcome::Fails("QEMU aborted".into())), Accel::Tcg);
    }

    /// A stand-in QEMU that never answers: the hang a nested KVM can show, which the real
    /// QEMU here does not produce on demand.
    #[test]
    fn a_qemu_that_never_answers_is_killed_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let hanging = dir.path().join("qemu-that-hangs");
        std::fs::write(&hanging, "#!/bin/sh\nexec sleep 60\n").unwrap();
        std::fs::set_permissions(&hanging, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = Instant::now();
        let outcome = probe(&hanging, Accel::Kvm, Duration::from_secs(1));
        assert_eq!(
            outcome,
            ProbeOutcome::Fails("no answer in 1 s (QEMU killed)".into())
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_missing_qemu_is_named() {
        let outcome = probe(Path::new("/nonexistent/qemu"), Accel::Kvm, DEADLINE);
        let ProbeOutcome::Fails(why) = outcome else {
            panic!("{outcome:?}")
        };
        assert!(why.contains("starting /nonexistent/qemu"), "{why}");
    }
}
