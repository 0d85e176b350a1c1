//! The real systemd reads the agent's units back as written, whatever values reach them: the
//! daemon unit (the agent's path, the Machine's name) and kubelet's unit (name, address, labels,
//! taints), each rendered with every value of `render::unit_value::HOSTILE` (a space, `%`, quotes,
//! a newline, `$`, backslashes) — in the arguments always, in the command's path where systemd
//! allows it there (quotes, backslashes and newlines it refuses, and so does the renderer) — run
//! by systemd, and the command line each process got compared with the values. Root on a systemd host: a lab VM (the `guest_` binaries, see
//! `harness/tests/lab_guest_tests.rs`); never on the build host.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent::exec;
use agent::paths::DAEMON_KUBECONFIG;
use agent::render::kubelet_node::{self, KUBELET_BINARY, KubeletFlags};
use agent::render::unit_value::{HOSTILE, exec_path};
use agent::start::daemon_unit;

/// Where the test's commands live and write what they got (not `/run`: Debian mounts it noexec).
const ROOT: &str = "/var/tmp/unbounded-unit-values";
const UNIT_DIR: &str = "/run/systemd/system";

/// The command each unit runs: writes its own path and arguments, NUL-separated, beside itself.
const RECORDER: &str = "#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" > \"$(dirname \"$0\")/argv\"\n";

fn systemctl(args: &[&str]) -> String {
    exec::run_stdout(Command::new("systemctl").args(args)).unwrap_or_else(|e| panic!("{e}"))
}

/// One unit under test: its name, the recorder it runs and what that must receive.
struct Case {
    unit: String,
    recorder: PathBuf,
    expected: Vec<String>,
}

/// A recorder in a directory named after `value` (a `/` in it made `_`), or a plain one where
/// systemd refuses the value in a command's path (the renderer refuses it too:
/// `unit_value::exec_path`).
fn recorder_for(kind: &str, i: usize, value: &str) -> PathBuf {
    let named = format!("{kind}-{i} {}", value.replace('/', "_"));
    let plain = value.contains(['"', '\'', '\\', '\n']);
    let dir = Path::new(ROOT).join(if plain { format!("{kind}-{i}") } else { named });
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("command");
    std::fs::write(&path, RECORDER).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn daemon_case(i: usize, value: &str) -> (Case, String) {
    let recorder = recorder_for("daemon", i, value);
    let text = daemon_unit::unit(&recorder, value).unwrap_or_else(|e| panic!("{e}"));
    let expected = [
        recorder.to_str().unwrap(),
        "daemon",
        "--machine",
        value,
        "--kubeconfig",
        DAEMON_KUBECONFIG,
    ];
    let expected = expected.map(str::to_owned).to_vec();
    let case = Case {
        unit: format!("unbounded-unit-values-daemon-{i}.service"),
        recorder,
        expected,
    };
    (case, text)
}

fn kubelet_case(i: usize, value: &str) -> (Case, String) {
    let recorder = recorder_for("kubelet", i, value);
    let flags = KubeletFlags {
        node_name: value.into(),
        node_ip: Some(value.into()),
        labels: vec![format!("a={value}")],
        register_with_taints: vec![format!("k={value}:NoSchedule")],
    };
    let text = kubelet_node::unit(&flags).replace(
        &format!("ExecStart={KUBELET_BINARY} "),
        &format!(
            "ExecStart={} ",
            exec_path("the recorder", &recorder).unwrap_or_else(|e| panic!("{e}"))
        ),
    );
    let expected = vec![
        recorder.to_str().unwrap().to_owned(),
        format!("--config={}", agent::paths::KUBELET_CONFIG),
        format!("--bootstrap-kubeconfig={}", kubelet_node::BOOTSTRAP_KUBECONFIG),
        format!("--kubeconfig={}", kubelet_node::KUBECONFIG),
        format!("--hostname-override={value}"),
        format!("--node-ip={value}"),
        format!("--node-labels=a={value}"),
        format!("--register-with-taints=k={value}:NoSchedule"),
    ];
    let case = Case {
        unit: format!("unbounded-unit-values-kubelet-{i}.service"),
        recorder,
        expected,
    };
    (case, text)
}

/// What the recorder wrote, once it has (a started unit's process runs a moment later).
fn recorded(case: &Case) -> Vec<String> {
    let file = case.recorder.with_file_name("argv");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(bytes) = std::fs::read(&file)
            && bytes.ends_with(b"\0")
        {
            let text = String::from_utf8(bytes).unwrap();
            return text
                .trim_end_matches('\0')
                .split('\0')
                .map(str::to_owned)
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "{} did not run its command within 30 s:\n{}",
            case.unit,
            systemctl(&["status", "--no-pager", &case.unit])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops and removes the test's units and files, however the test ends.
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for unit in &self.0 {
            let _ = exec::run(Command::new("systemctl").args(["stop", unit]));
            let _ = std::fs::remove_file(Path::new(UNIT_DIR).join(unit));
        }
        let _ = exec::run(Command::new("systemctl").arg("daemon-reload"));
        let _ = std::fs::remove_dir_all(ROOT);
    }
}

#[test]
fn guest_systemd_runs_the_daemon_and_kubelet_units_with_hostile_values_as_written() {
    agent::guest_test::require_root_on_systemd();
    let _ = std::fs::remove_dir_all(ROOT);
    let mut cases = Vec::new();
    for (i, value) in HOSTILE.iter().enumerate() {
        for (case, text) in [daemon_case(i, value), kubelet_case(i, value)] {
            std::fs::write(Path::new(UNIT_DIR).join(&case.unit), text).unwrap();
            cases.push(case);
        }
    }
    let _cleanup = Cleanup(cases.iter().map(|c| c.unit.clone()).collect());
    systemctl(&["daemon-reload"]);
    let units: Vec<&str> = cases.iter().map(|c| c.unit.as_str()).collect();
    systemctl(&[&["start"][..], &units].concat());
    let mut wrong = Vec::new();
    for case in &cases {
        let got = recorded(case);
        if got != case.expected {
            wrong.push(format!("{}: got {got:?}, wrote {:?}", case.unit, case.expected));
        }
    }
    assert!(
        wrong.is_empty(),
        "systemd read these units otherwise:\n{}",
        wrong.join("\n")
    );
    // The daemon's description names the Machine on one line, `%` kept.
    let description = systemctl(&[
        "show",
        "-p",
        "Description",
        "--value",
        "unbounded-unit-values-daemon-1.service",
    ]);
    assert_eq!(
        description.trim_end(),
        format!("unbounded-agent daemon for Machine {}", HOSTILE[1])
    );
}
