//! The built `unbounded-localdns-supervisor` takes systemd's watchdog (`WATCHDOG_USEC`) only when
//! `WATCHDOG_PID` is unset or names its own process (sd-notify's `watchdog_enabled`). CoreDNS is
//! a missing file here, so the supervisor logs its watchdog, fails to start CoreDNS and exits 1.

use std::process::{Command, Output};

static BIN: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| agent::test_binary!("unbounded-localdns-supervisor"));

/// Runs `command` with only the supervisor's environment file's variables, `WATCHDOG_USEC=1000000`
/// (a tick of 200 ms) and `extra`; CoreDNS points at a file that does not exist.
fn with_settings(mut command: Command, dir: &std::path::Path, extra: &[(&str, String)]) -> Output {
    command
        .env_clear()
        .envs(extra.iter().map(|(k, v)| (k, v)))
        .env("PATH", "/usr/bin:/bin")
        .env("LOCALDNS_NODE_LISTENER", "127.0.0.1")
        .env("LOCALDNS_CLUSTER_LISTENER", "127.0.0.2")
        .env("LOCALDNS_COREFILE", dir.join("Corefile"))
        .env("LOCALDNS_COREDNS", dir.join("no-coredns-here"))
        .env("LOCALDNS_HEALTH_NAME", "health-check.localdns.local")
        .env("LOCALDNS_READY_PORT", "8181")
        .env("WATCHDOG_USEC", "1000000")
        .output()
        .unwrap()
}

/// The supervisor's stderr, after checking it ended at the missing CoreDNS (exit 1).
fn log_of(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot start CoreDNS"), "{stderr}");
    stderr
}

const ON: &str = "systemd watchdog on: a health check every 200ms";
const OFF: &str = "no systemd watchdog for this process: a health check every 12s";

#[test]
fn watchdog_without_pid_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of(&with_settings(Command::new(&*BIN), dir.path(), &[]));
    assert!(log.contains(ON) && !log.contains(OFF), "{log}");
}

#[test]
fn watchdog_naming_the_supervisors_pid_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    // The shell's PID is the supervisor's: `exec` keeps it.
    let mut shell = Command::new("/bin/sh");
    shell
        .args(["-c", "export WATCHDOG_PID=$$; exec \"$0\""])
        .arg(&*BIN);
    let log = log_of(&with_settings(shell, dir.path(), &[]));
    assert!(log.contains(ON) && !log.contains(OFF), "{log}");
}

#[test]
fn watchdog_for_another_pid_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    // This test's own PID: never the supervisor's.
    let pid = ("WATCHDOG_PID", std::process::id().to_string());
    let log = log_of(&with_settings(Command::new(&*BIN), dir.path(), &[pid]));
    assert!(log.contains(OFF) && !log.contains(ON), "{log}");
}
