//! `start`'s host-changing parts on a real Debian host: host preparation (modules, sysctls, their
//! persistent files) and the in-machine command runner against the host's own systemd. Root in a
//! lab VM (the `guest_` binaries, see `harness/tests/lab_guest_tests.rs`); never on the build host.

use std::path::Path;

use agent::exec::CommandFailed;
use agent::machine::MachineRunner;
use agent::render::host_prep::{self, MODULES, SYSCTLS, proc_sys_path};
use agent::render::{Place, Rendered, RenderedFile};
use agent::start::host::prepare;

/// Only the two host-preparation files, as `start` renders them.
fn host_prep_files() -> Rendered {
    let file = |path: &str, contents: String| RenderedFile {
        path: path.into(),
        local_path: path.into(),
        place: Place::Host,
        mode: 0o644,
        contents: contents.into_bytes(),
    };
    Rendered {
        files: vec![
            file(host_prep::SYSCTL_FILE, host_prep::sysctl_conf()),
            file(host_prep::MODULES_FILE, host_prep::modules_conf()),
        ],
        links: Vec::new(),
    }
}

#[test]
fn guest_host_preparation_loads_modules_sets_sysctls_and_a_second_run_changes_nothing() {
    agent::guest_test::require_root_on_systemd();
    let root = tempfile::tempdir().unwrap();
    let first = prepare(root.path(), &host_prep_files()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first.files.len(), 2, "{first:?}");
    for module in MODULES {
        assert!(
            Path::new("/sys/module").join(module).exists(),
            "{module} is not loaded"
        );
    }
    for (key, value) in SYSCTLS {
        let now = std::fs::read_to_string(proc_sys_path(key)).unwrap();
        assert_eq!(now.trim(), value, "{key}");
    }
    let sysctl = std::fs::read_to_string(root.path().join("etc/sysctl.d/90-unbounded-agent.conf")).unwrap();
    assert!(sysctl.contains("\nnet.ipv4.ip_forward = 1\n"), "{sysctl}");
    let second = prepare(root.path(), &host_prep_files()).unwrap_or_else(|e| panic!("{e}"));
    assert!(second.is_empty(), "a second preparation changed {second:?}");
}

#[test]
fn guest_persisted_sysctls_are_accepted_by_systemd_sysctl() {
    agent::guest_test::require_root_on_systemd();
    let root = tempfile::tempdir().unwrap();
    prepare(root.path(), &host_prep_files()).unwrap_or_else(|e| panic!("{e}"));
    // `sysctl -p FILE` applies exactly what a reboot would apply; an unknown key fails it.
    let file = root.path().join("etc/sysctl.d/90-unbounded-agent.conf");
    agent::exec::run(std::process::Command::new("sysctl").arg("-p").arg(&file))
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn guest_in_machine_runner_failure_carries_the_inner_command_status_and_output() {
    agent::guest_test::require_root_on_systemd();
    // `.host`: the host's own systemd, through the same `systemd-run --machine=` path.
    let runner = MachineRunner::new(".host");
    let ok = runner
        .run_stdout(&["sh", "-c", "echo hello"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok, "hello\n");
    let err = runner
        .run(&["sh", "-c", "echo out; echo err >&2; exit 3"])
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("systemd-run --machine=.host --pipe --wait")
            && text.contains("sh -c 'echo out; echo err >&2; exit 3'"),
        "{text}"
    );
    assert!(text.contains("exit status: 3"), "{text}");
    assert!(
        matches!(&err, CommandFailed::Status { stdout, .. } if stdout.contains("out")),
        "{text}"
    );
    assert!(err.stderr().contains("err"), "{text}");
}
