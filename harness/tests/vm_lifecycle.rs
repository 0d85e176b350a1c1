//! One VM on user-mode networking with a 9p share: guest commands (status, stdout, stderr, non-zero fails),
//! files in and out, `harness vm exec|cp` against it, evidence, reboot from inside and
//! `system_reset` (each a new boot id), power-off (QEMU exits), and nothing left behind.
//!
//! Needs the host image: `harness images build`.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Instant;

use sha2::Digest;

use harness::vm::{Accel, ExitKind, Vm, VmError, VmSpec};

mod vm_support;
use vm_support::{image, vm_lab};

fn harness_cli(lab: &str, args: &[&str]) -> std::process::Output {
    Command::new(agent::test_binary!("harness"))
        .arg("vm")
        .args(args)
        .env("LAB_NAME", lab)
        .output()
        .expect("running the harness binary")
}

#[test]
fn vm_runs_commands_copies_files_reboots_resets_and_powers_off() {
    let lab = vm_lab();
    let started = Instant::now();
    let share = tempfile::tempdir().unwrap();
    std::fs::write(share.path().join("hello.txt"), "shared over 9p\n").unwrap();
    let mut spec = VmSpec::new(&lab, "lifecycle", image());
    spec.share = Some(share.path().to_path_buf());
    let mut vm = Vm::boot(spec).expect("booting the VM");
    let boot = started.elapsed();
    let first_boot = vm.boot_id().to_string();
    assert_eq!(
        vm.run("cat /proc/sys/kernel/random/boot_id").unwrap().trim(),
        first_boot,
        "the READY line carries the guest's boot id"
    );

    // Commands: stdout, stderr and status; a non-zero exit fails unless allowed.
    let t = Instant::now();
    assert_eq!(vm.run("echo out; echo err >&2").unwrap(), "out\n");
    let command_time = t.elapsed();
    let out = vm.run_unchecked("echo partial; echo broken >&2; exit 3").unwrap();
    assert_eq!(out.status, ExitKind::Code(3));
    assert_eq!(out.stdout_text(), "partial\n");
    assert_eq!(out.stderr_text(), "broken\n");
    match vm.run("echo partial; echo broken >&2; exit 3") {
        Err(VmError::CommandFailed {
            status,
            stdout,
            stderr,
            ..
        }) => {
            assert_eq!(
                (status, stdout.as_str(), stderr.as_str()),
                (ExitKind::Code(3), "partial\n", "broken\n")
            );
        }
        other => panic!("a non-zero exit must fail, got {other:?}"),
    }
    assert_eq!(
        vm.cmd("cat").stdin("from stdin").run().unwrap().stdout_text(),
        "from stdin"
    );
    assert!(
        vm.run("ip -o addr show").unwrap().contains("10.0.2.15/24"),
        "lab-net set the address"
    );
    guest_cpu_has_no_cmpxchg16b_under_tcg(&vm);
    assert_eq!(
        vm.run("cat /mnt/lab/hello.txt").unwrap(),
        "shared over 9p\n",
        "the 9p share is mounted"
    );
    assert!(
        vm.run_unchecked("touch /mnt/lab/x").unwrap().status != ExitKind::Code(0),
        "the share is read-only"
    );

    // Files in and out, byte for byte, with the mode kept.
    let tmp = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let host_in = tmp.path().join("in.bin");
    std::fs::write(&host_in, &data).unwrap();
    std::fs::set_permissions(&host_in, std::fs::Permissions::from_mode(0o750)).unwrap();
    let t = Instant::now();
    vm.copy_in(&host_in, "/root/in.bin").unwrap();
    let copy_in_time = t.elapsed();
    assert_eq!(vm.run("stat -c %a /root/in.bin").unwrap().trim(), "750");
    let host_sum = hex::encode(sha2::Sha256::digest(&data));
    assert!(vm.run("sha256sum /root/in.bin").unwrap().starts_with(&host_sum));
    let host_out = tmp.path().join("out.bin");
    let t = Instant::now();
    vm.copy_out("/root/in.bin", &host_out).unwrap();
    let copy_out_time = t.elapsed();
    assert!(
        std::fs::read(&host_out).unwrap() == data,
        "the file came back changed"
    );
    // The agent's own file commands (the fallback when the data port is unavailable).
    let agent_only = harness::vm::GuestAgent::new("lifecycle", vm.run_dir().qga(), *vm.deadlines());
    agent_only
        .write_file("/root/small.bin", &data[..300_000], 0o600, &|| None)
        .unwrap();
    assert!(agent_only.read_file("/root/small.bin", &|| None).unwrap() == data[..300_000]);
    // The new part of a growing file, read by the agent itself (how `start`'s progress is shown).
    let mut session = agent_only.session(&|| None).unwrap();
    let tail = session.read_file_from("/root/small.bin", 299_990).unwrap();
    assert!(tail == data[299_990..300_000], "{tail:?}");
    assert_eq!(session.read_file_from("/root/small.bin", 300_000).unwrap(), b"");
    let absent = session.read_file_from("/root/absent", 0).unwrap_err();
    assert!(absent.is_open_refused(), "{absent:?}");
    drop(session);
    assert_eq!(vm.run("stat -c %a /root/small.bin").unwrap().trim(), "600");
    let err = vm
        .copy_out("/nonexistent/file", tmp.path().join("x"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/file"), "{err}");

    // The CLI reaches the same VM through its run directory.
    let exec = harness_cli(&lab, &["exec", "lifecycle", "--", "echo via-cli; exit 4"]);
    assert_eq!(String::from_utf8_lossy(&exec.stdout), "via-cli\n");
    assert_eq!(
        exec.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&exec.stderr)
    );
    // Its output comes as the command runs, and a command past `--timeout` names the flag.
    let mut streaming = Command::new(agent::test_binary!("harness"))
        .args([
            "vm",
            "exec",
            "lifecycle",
            "--",
            "echo first; sleep 12; echo second",
        ])
        .env("LAB_NAME", &lab)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first_line = String::new();
    let mut reader = std::io::BufReader::new(streaming.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut reader, &mut first_line).unwrap();
    assert_eq!(first_line, "first\n");
    assert!(
        streaming.try_wait().unwrap().is_none(),
        "`first` came only once the command had ended: not streamed"
    );
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
    assert_eq!(rest, "second\n");
    assert!(streaming.wait().unwrap().success());
    let late = harness_cli(&lab, &["exec", "lifecycle", "--timeout", "3", "--", "sleep 30"]);
    let said = String::from_utf8_lossy(&late.stderr);
    assert!(
        !late.status.success() && said.contains("--timeout SECONDS"),
        "{said}"
    );

    // A directory out of the VM and back in with `cp -r`.
    let tree = tmp.path().join("tree");
    let out = harness_cli(
        &lab,
        &["cp", "-r", "lifecycle:/etc/systemd", tree.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        tree.join("system.conf").is_file(),
        "cp -r made {} the copy itself",
        tree.display()
    );
    std::fs::write(tree.join("added.txt"), "from the host\n").unwrap();
    let out = harness_cli(&lab, &["cp", "-r", tree.to_str().unwrap(), "lifecycle:/root"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(vm.run("cat /root/tree/added.txt").unwrap(), "from the host\n");
    assert!(
        vm.run("test -f /root/tree/system.conf && echo yes")
            .unwrap()
            .contains("yes")
    );

    let cli_out = tmp.path().join("cli-out");
    let cp = harness_cli(
        &lab,
        &["cp", "lifecycle:/etc/hostname", cli_out.to_str().unwrap()],
    );
    assert!(cp.status.success(), "{}", String::from_utf8_lossy(&cp.stderr));
    assert_eq!(
        std::fs::read_to_string(&cli_out).unwrap(),
        vm.run("cat /etc/hostname").unwrap()
    );

    // Evidence, asked for: console, QEMU stderr and the guest's state.
    let dir = harness::vm::evidence::collect(&vm, "vm_lifecycle", "asked for by the test");
    let console = std::fs::read_to_string(dir.join("console.log")).unwrap();
    assert!(console.contains("Linux version"), "console log has the boot");
    let journal = std::fs::read_to_string(dir.join("journal.txt")).unwrap();
    assert!(
        journal.contains("lab-ready"),
        "journal has the readiness unit: {}",
        &journal[..journal.len().min(500)]
    );
    assert!(
        std::fs::read_to_string(dir.join("ip-addr.txt"))
            .unwrap()
            .contains("10.0.2.15")
    );
    for file in ["nft-ruleset.txt", "machinectl-list.txt", "qemu.stderr", "vm.json"] {
        assert!(dir.join(file).is_file(), "{file} missing in {}", dir.display());
    }

    // Reboot from inside: a new boot id, and the guest works again.
    let t = Instant::now();
    vm.reboot().unwrap();
    let reboot_time = t.elapsed();
    let second_boot = vm.boot_id().to_string();
    assert_ne!(second_boot, first_boot);
    assert_eq!(
        vm.run("cat /proc/sys/kernel/random/boot_id").unwrap().trim(),
        second_boot
    );
    assert!(
        vm.run("cat /root/in.bin | wc -c").unwrap().trim() == "3000000",
        "the disk kept the file"
    );

    // Reset by QMP: a new boot id again.
    let t = Instant::now();
    vm.reset().unwrap();
    let reset_time = t.elapsed();
    assert_ne!(vm.boot_id(), second_boot);
    assert_ne!(vm.boot_id(), first_boot);
    assert_eq!(
        vm.run("cat /proc/sys/kernel/random/boot_id").unwrap().trim(),
        vm.boot_id()
    );

    // Power off: QEMU exits by itself.
    let t = Instant::now();
    let status = vm.power_off().unwrap();
    let power_off_time = t.elapsed();
    assert!(status.success(), "QEMU exited with {status}");
    assert!(!vm.is_running());

    let run_dir = vm.run_dir().clone();
    let pid = vm.pid();
    vm.shutdown().unwrap();
    assert!(!run_dir.dir().exists(), "run directory left behind");
    assert!(!run_dir.overlay().exists(), "overlay left behind");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "QEMU still exists"
    );
    eprintln!(
        "timings: boot {boot:.1?}, command {command_time:.2?}, copy in 3 MB {copy_in_time:.2?}, copy out {copy_out_time:.2?}, \
         reboot {reboot_time:.1?}, reset {reset_time:.1?}, power-off {power_off_time:.1?}"
    );
}

/// Under TCG the guest sees `max` without `cx16` (`harness::vm::accel::TCG_CPU`: QEMU 7.2's
/// `cmpxchg16b` can corrupt the guest's EFLAGS) and still the rest of `max` (SSE4.2 here); under
/// KVM the host's own CPU.
fn guest_cpu_has_no_cmpxchg16b_under_tcg(vm: &Vm) {
    let line = vm.run("grep -m1 '^flags' /proc/cpuinfo").unwrap();
    let flags: Vec<&str> = line
        .split_once(':')
        .map(|(_, f)| f)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert!(flags.contains(&"sse4_2"), "the guest's CPU flags: {line}");
    if vm.accel() == Accel::Tcg {
        assert!(
            !flags.contains(&"cx16"),
            "under TCG the guest must not see `cx16`: {line}"
        );
    }
}
