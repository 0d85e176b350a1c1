//! The nspawn machine as `start` sets it up, with the lab's real machine rootfs: unpacked through
//! `agent::artifact::rootfs`, the `.nspawn` file and unit override of `agent::render::nspawn`,
//! started with `machinectl`, reached through the in-machine runner. Root in a lab VM (see
//! `harness/tests/lab_guest_tests.rs`), which hands the rootfs tarball in `UNBOUNDED_TEST_ROOTFS`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent::artifact::source::{Expected, Location, Resolved};
use agent::artifact::{FetchOptions, Fetcher, checksum, rootfs};
use agent::exec;
use agent::files::write_atomic;
use agent::machine::{MachineRunner, machinectl};
use agent::names::Slot;
use agent::render::nspawn;

/// The environment variable naming the machine rootfs tarball in the guest.
const ROOTFS_ENV: &str = "UNBOUNDED_TEST_ROOTFS";
/// This test's machine: the second slot, so nothing else in the VM is in the way.
const SLOT: Slot = Slot::Kube2;

fn rootfs_tarball() -> PathBuf {
    let path = std::env::var_os(ROOTFS_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "{ROOTFS_ENV} is not set: the guest runner must hand in the machine rootfs \
             (harness::images::rootfs, built by `harness images build`) with \
             `GuestTests::add_file(&rootfs.tarball, \"rootfs.tar.gz\", \"{ROOTFS_ENV}\")`"
            )
        });
    assert!(path.is_file(), "{ROOTFS_ENV}={} is not a file", path.display());
    path
}

fn sh(script: &str) -> String {
    exec::run_stdout(Command::new("sh").args(["-c", script])).unwrap_or_else(|e| panic!("{e}"))
}

/// Stops the machine and removes its files, also when the test fails.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let m = SLOT.as_str();
        let _ = exec::run(Command::new("machinectl").args(["disable", m]));
        let _ = exec::run(Command::new("systemctl").args(["stop", &machinectl::nspawn_unit(m)]));
        let _ = std::fs::remove_file(nspawn::nspawn_path(SLOT));
        let _ = std::fs::remove_dir_all(Path::new(&nspawn::override_path(SLOT)).parent().unwrap());
        let _ = exec::run(Command::new("systemctl").arg("daemon-reload"));
        let _ = std::fs::remove_dir_all(SLOT.rootfs());
    }
}

#[test]
fn guest_a_machine_set_up_as_start_does_boots_and_runs_commands() {
    let tarball = rootfs_tarball();
    let _cleanup = Cleanup;
    let m = SLOT.as_str();

    // The rootfs, through the same code as `start` (pinned digest, hostile-tarball checks).
    let sha = checksum::sha256_file(&tarball).unwrap();
    let resolved = Resolved {
        location: Location::File(tarball.clone()),
        version: String::new(),
        arch: "amd64".into(),
        expected: Expected::Pinned(sha.clone()),
        bundle: None,
    };
    let fetcher = Fetcher::new(FetchOptions::default());
    let started = Instant::now();
    let (_, changed) =
        rootfs::install(&resolved, &SLOT.rootfs(), false, &fetcher).unwrap_or_else(|e| panic!("{e}"));
    assert!(changed);
    eprintln!("rootfs unpacked in {:.1}s", started.elapsed().as_secs_f64());
    let (_, changed) = rootfs::install(&resolved, &SLOT.rootfs(), false, &fetcher).unwrap();
    assert!(!changed, "a second install of the same rootfs changed it");

    // A resolver the machine must keep (ResolvConf=off).
    let resolv = SLOT.rootfs().join("etc/resolv.conf");
    write_atomic(&resolv, b"nameserver 192.0.2.53\n", 0o644).unwrap();

    write_atomic(
        Path::new(&nspawn::nspawn_path(SLOT)),
        nspawn::nspawn_file(SLOT).as_bytes(),
        0o644,
    )
    .unwrap();
    write_atomic(
        Path::new(&nspawn::override_path(SLOT)),
        nspawn::override_conf(SLOT).as_bytes(),
        0o644,
    )
    .unwrap();
    exec::run(Command::new("systemctl").arg("daemon-reload")).unwrap();

    let runner = MachineRunner::new(m);
    machinectl::enable(m).unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    assert!(machinectl::start(m).unwrap_or_else(|e| panic!("{e}")));
    // Under TCG a boot takes longer than the production 30 s.
    machinectl::wait_until_answering(&runner, Duration::from_secs(180)).unwrap_or_else(|e| {
        let journal = sh(&format!(
            "journalctl -u {} --no-pager | tail -n 60",
            machinectl::nspawn_unit(m)
        ));
        panic!("{e}\n--- host journal of the machine ---\n{journal}")
    });
    eprintln!("machine answering after {:.1}s", started.elapsed().as_secs_f64());
    let invocation = sh(&format!(
        "systemctl show --property=InvocationID --value {}",
        machinectl::nspawn_unit(m)
    ));

    let os = runner
        .run_stdout(&["cat", "/etc/os-release"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(os.contains("trixie"), "{os}");
    // The host's network is shared: the same interfaces inside.
    let host_links = sh("ip -o link show | cut -d: -f2 | sort");
    let machine_links = runner
        .run_stdout(&["sh", "-c", "ip -o link show | cut -d: -f2 | sort"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(machine_links, host_links);
    assert_eq!(
        std::fs::read_to_string(&resolv).unwrap(),
        "nameserver 192.0.2.53\n"
    );
    let mounts = runner
        .run_stdout(&[
            "sh",
            "-c",
            "stat -f -c %T /sys/fs/bpf; test -r /dev/kmsg && echo kmsg; test -d /lib/modules && echo modules; \
             test -w /proc/sys/net/ipv4/ip_forward && echo net-writable",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mounts, "bpf_fs\nkmsg\nmodules\nnet-writable\n");

    // A failing in-machine command: the whole command line, the status, stdout and stderr.
    let err = runner
        .run(&["sh", "-c", "echo out; echo err >&2; exit 7"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("systemd-run --machine={m} --pipe --wait"))
            && err.contains("exit status: 7")
            && err.contains("out\n")
            && err.contains("err\n"),
        "{err}"
    );

    // Starting a running machine changes nothing.
    assert!(!machinectl::start(m).unwrap());
    let again = sh(&format!(
        "systemctl show --property=InvocationID --value {}",
        machinectl::nspawn_unit(m)
    ));
    assert_eq!(again, invocation);
    assert_eq!(rootfs::present(&SLOT.rootfs()), rootfs::Present::Ours(sha));
}
