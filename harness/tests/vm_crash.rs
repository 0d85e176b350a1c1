//! One VM whose QEMU is killed from outside: the harness reports a crash with QEMU's status
//! and the console, and cleans up. Before that, on the running VM: a second boot of the same
//! VM is refused, `wait_until` explains its timeout, and `harness vm shell` (hvc0) gives a
//! root shell.
//!
//! Needs the host image: `harness images build`.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use harness::vm::{BootImage, Vm, VmError, VmSpec};

mod vm_support;
use vm_support::{image, vm_lab};

/// Types `command` into `harness vm shell NAME` (the hvc0 console) until `expect` shows up,
/// then leaves with Ctrl-]; returns what the shell printed.
fn cli_shell(lab: &str, name: &str, command: &str, expect: &str, timeout: Duration) -> String {
    let mut child = Command::new(agent::test_binary!("harness"))
        .args(["vm", "shell", name])
        .env("LAB_NAME", lab)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running harness vm shell");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut seen = String::new();
    while !seen.contains(expect) && started.elapsed() < timeout {
        stdin.write_all(format!("\r{command}\r").as_bytes()).unwrap();
        let until = Instant::now() + Duration::from_secs(3);
        while let Ok(chunk) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains(expect) {
                break;
            }
        }
    }
    stdin.write_all(&[0x1d]).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        seen.contains(expect),
        "no {expect:?} from `harness vm shell` after {timeout:?}; saw:\n{seen}"
    );
    assert!(
        out.status.success(),
        "harness vm shell: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    seen
}

#[test]
fn qemu_killed_from_outside_is_reported_as_a_crash() {
    let spec = VmSpec::new(vm_lab(), "crash", image());
    let vm = Vm::boot(spec.clone()).expect("booting the VM");

    // The same VM cannot be booted twice.
    match Vm::boot(spec) {
        Err(err @ VmError::RunDir(_)) => assert!(err.to_string().contains("already running"), "{err}"),
        Err(other) => panic!("expected 'already running', got {other}"),
        Ok(_) => panic!("a second VM with the same name booted"),
    }

    // A wait that cannot succeed says what, where, how long and why.
    let err = vm
        .wait_until(Duration::from_secs(2), "/nonexistent to appear", || {
            vm.run("test -e /nonexistent")
        })
        .unwrap_err()
        .to_string();
    for part in [
        "/nonexistent to appear",
        "VM crash",
        "test -e /nonexistent",
        "exit status 1",
    ] {
        assert!(err.contains(part), "{part:?} missing in {err}");
    }

    // hvc0 is a root shell.
    cli_shell(
        &vm_lab(),
        "crash",
        "echo hvc-$((6*7)) $(id -un)",
        "hvc-42 root",
        Duration::from_secs(60),
    );

    // Kill QEMU from outside, as the OOM killer or a person would.
    let pid = vm.pid();
    let run_dir = vm.run_dir().clone();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let started = Instant::now();
    let err = vm.run("true").unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "noticing the crash took {:?}",
        started.elapsed()
    );
    let text = err.to_string();
    assert!(matches!(err, VmError::Crashed(_)), "{text}");
    for part in [
        "QEMU exited unexpectedly",
        "signal: 9",
        "last console lines",
        "login:",
    ] {
        assert!(text.contains(part), "{part:?} missing in {text}");
    }
    assert!(!vm.is_running());

    vm.shutdown().expect("cleaning up after the crash");
    assert!(
        !run_dir.dir().exists() && !run_dir.overlay().exists(),
        "left behind after the crash"
    );
}

#[test]
fn missing_base_image_fails_naming_the_build_command() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = BootImage {
        disk: tmp.path().join("disk.qcow2"),
        kernel: tmp.path().join("vmlinuz"),
        initrd: tmp.path().join("initrd.img"),
    };
    let err = Vm::boot(VmSpec::new(vm_lab(), "noimage", missing))
        .err()
        .expect("boot without an image fails");
    let text = err.to_string();
    assert!(
        text.contains("harness images build") && text.contains("does not exist"),
        "{text}"
    );
    assert!(
        text.contains(tmp.path().to_str().unwrap()),
        "the error names the missing file: {text}"
    );
    let run = harness::vm::RunDir::new(&vm_lab(), "noimage");
    assert!(
        !run.dir().exists(),
        "a failed boot left {} behind",
        run.dir().display()
    );
}
