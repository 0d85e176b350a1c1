//! `harness lab up` / `harness lab down` as a person uses them (network only,
//! `--no-vm`; the VM path is covered by the scenarios): up returns once the lab runs and leaves
//! it to `lab down`; `up --foreground` keeps the lab until `lab down` or Ctrl-C; both leave
//! nothing behind. Needs root.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use harness::lab::owner;
use harness::netns;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

static HARNESS: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| agent::test_binary!("harness"));

/// A lab number nobody uses now, from the top of the range (tests start at the bottom).
fn unused_number(skip: u8) -> u8 {
    let _lock = owner::lock().unwrap();
    (100..=154)
        .rev()
        .filter(|n| {
            let name = format!("lab-{n}");
            !netns::exists(&name) && !owner::run_dir(&name).exists()
        })
        .nth(usize::from(skip))
        .expect("a free lab number between 100 and 154")
}

/// Starts `harness lab up --no-vm --foreground --lab <n>` and waits until it says the lab runs.
fn lab_up(n: u8) -> Child {
    let mut child = Command::new(&*HARNESS)
        .args(["lab", "up", "--no-vm", "--foreground", "--lab", &n.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            seen += &line;
            seen += "\n";
            if line.contains("is running") {
                let _ = tx.send(Ok(seen.clone()));
            }
        }
        let _ = tx.send(Err(seen));
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(_)) => child,
        Ok(Err(output)) => panic!("`harness lab up` ended before the lab ran:\n{output}"),
        Err(_) => panic!("`harness lab up` did not report a running lab within 30 s"),
    }
}

fn assert_nothing_left(n: u8) {
    let name = format!("lab-{n}");
    assert!(!netns::exists(&name), "namespace {name} survived");
    assert!(
        !owner::run_dir(&name).exists(),
        "{} survived",
        owner::run_dir(&name).display()
    );
    assert!(
        !owner::state_dir(&name).exists(),
        "{} survived",
        owner::state_dir(&name).display()
    );
    let links = agent::exec::run_stdout(Command::new("ip").args(["-o", "link"])).unwrap();
    assert!(!links.contains(&format!("labbr{n}:")), "{links}");
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    for _ in 0..300 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("`harness lab up` did not exit within 30 s");
}

#[test]
fn lab_up_answers_its_example_name_and_lab_down_from_another_terminal_stops_it_leaving_nothing() {
    let n = unused_number(0);
    let mut up = lab_up(n);
    let name = format!("lab-{n}");
    assert!(netns::exists(&name));
    assert_eq!(owner::read_owner(&name).map(|o| o.pid), Some(up.id() as i32));
    let dig =
        agent::exec::run_unchecked(netns::command_in(&name, "dig").args(["@192.168.100.1", "x.lab.test"]))
            .unwrap();
    assert!(
        String::from_utf8_lossy(&dig.stdout).contains("NXDOMAIN"),
        "the lab's DNS server did not answer"
    );
    // `lab up` adds one name to try by hand (docs/quickstart.md), pointing at the bridge.
    let bridge = "192.168.100.1".to_string();
    let hello = agent::exec::run_stdout(netns::command_in(&name, "dig").args([
        &format!("@{bridge}"),
        "+short",
        "hello.lab.test",
    ]))
    .unwrap();
    assert_eq!(hello.trim(), bridge, "hello.lab.test");

    let down = agent::exec::run(Command::new(&*HARNESS).args(["lab", "down", "--lab", &n.to_string()]));
    assert!(down.is_ok(), "{}", down.unwrap_err());
    let status = wait_exit(&mut up);
    assert!(status.success(), "`harness lab up` exited with {status}");
    assert_nothing_left(n);
}

#[test]
fn lab_up_returns_once_the_lab_runs_and_leaves_it_to_lab_down() {
    let n = unused_number(4);
    let name = format!("lab-{n}");
    let up =
        agent::exec::run(Command::new(&*HARNESS).args(["lab", "up", "--no-vm", "--lab", &n.to_string()]))
            .unwrap_or_else(|e| panic!("{e}"));
    let said = String::from_utf8_lossy(&up.stderr);
    assert!(
        said.contains("is running") && said.contains("keeps running"),
        "{said}"
    );
    assert!(said.contains(&format!("harness lab down --lab {n}")), "{said}");
    let owner = owner::read_owner(&name).expect("the lab has an owner");
    assert!(owner.is_alive(), "the lab's owner ended with `lab up`");
    let dig =
        agent::exec::run_unchecked(netns::command_in(&name, "dig").args(["@192.168.100.1", "x.lab.test"]))
            .unwrap();
    assert!(
        String::from_utf8_lossy(&dig.stdout).contains("NXDOMAIN"),
        "the lab's DNS does not answer"
    );
    agent::exec::run(Command::new(&*HARNESS).args(["lab", "down", "--lab", &n.to_string()])).unwrap();
    assert_nothing_left(n);
}

#[test]
fn ctrl_c_stops_lab_up_and_leaves_nothing() {
    let n = unused_number(1);
    let mut up = lab_up(n);
    kill(Pid::from_raw(up.id() as i32), Signal::SIGINT).unwrap();
    let status = wait_exit(&mut up);
    assert!(status.success(), "`harness lab up` exited with {status}");
    assert_nothing_left(n);
}

/// A lab whose owner was killed (SIGKILL: nothing tore it down) is not healthy: `lab status`
/// exits 1 naming the gone owner, and `lab down` still removes everything the lab left.
#[test]
fn lab_down_removes_a_lab_whose_owner_was_killed() {
    let n = unused_number(2);
    let mut up = lab_up(n);
    let owner = up.id();
    kill(Pid::from_raw(owner as i32), Signal::SIGKILL).unwrap();
    up.wait().unwrap();
    assert!(
        netns::exists(&format!("lab-{n}")),
        "SIGKILL cannot clean up; the lab should still be there"
    );
    let status =
        agent::exec::run_unchecked(Command::new(&*HARNESS).args(["lab", "status", "--lab", &n.to_string()]))
            .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&status.stdout),
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(status.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("the lab's owner {owner} is gone")),
        "{said}"
    );
    agent::exec::run(Command::new(&*HARNESS).args(["lab", "down", "--lab", &n.to_string()])).unwrap();
    assert_nothing_left(n);
}

#[test]
fn lab_up_with_a_missing_node_config_fails_naming_the_file_and_starts_nothing() {
    let n = unused_number(3);
    let out = agent::exec::run_unchecked(Command::new(&*HARNESS).args([
        "lab",
        "up",
        "--lab",
        &n.to_string(),
        "node-configs/does-not-exist.json",
    ]))
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("node-configs/does-not-exist.json"), "{stderr}");
    assert_nothing_left(n);
}

/// Run by a user other than root (`nobody`, through `setpriv`), `harness lab up` stops at once with
/// one line saying it needs root, and makes nothing.
#[test]
fn a_run_without_root_stops_at_once_in_one_line() {
    use std::os::unix::fs::PermissionsExt;
    // A copy nobody can execute (the build directory under root's home is not theirs to read).
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.path().join("harness");
    std::fs::copy(&*HARNESS, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let n = unused_number(5);
    let out = agent::exec::run_unchecked(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&copy)
            .args(["lab", "up", "--no-vm", "--lab", &n.to_string()])
            .current_dir(dir.path()),
    )
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("must run as root"), "{stderr}");
    assert_nothing_left(n);
}

/// `harness lab status`, `harness lab list` and `harness lab logs` from another process, on a lab
/// without VMs or control plane: the status names the owner and the log directory (and exits 0:
/// nothing is wrong), the list shows the lab with its live owner; the logs directory holds
/// the lab's record and its DNS/HTTP logs, and the index marks the cluster as not collected.
#[test]
fn lab_status_and_logs_describe_a_running_lab_from_another_process() {
    let n = unused_number(6);
    let mut up = lab_up(n);
    let lab = n.to_string();
    let out =
        agent::exec::run(Command::new(&*HARNESS).args(["lab", "status", "--lab", &lab, "--output", "json"]))
            .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["lab"], format!("lab-{n}"));
    assert_eq!(status["owner"]["pid"], up.id());
    assert_eq!(status["owner"]["alive"], true);
    assert_eq!(status["vms"], serde_json::json!([]));
    assert!(status["kubeconfig"].is_null(), "{status}");
    let log_dir = status["logs"]["lab"].as_str().expect("the lab's log directory");
    assert!(
        std::path::Path::new(log_dir).join("dns-queries.log").is_file(),
        "{status}"
    );
    let text =
        agent::exec::run_stdout(Command::new(&*HARNESS).args(["lab", "status", "--lab", &lab])).unwrap();
    assert!(text.contains("no VMs") && text.contains(log_dir), "{text}");
    // `lab list --output json`: the lab with its live owner, not stale, no VMs.
    let listed: serde_json::Value = serde_json::from_str(
        &agent::exec::run_stdout(Command::new(&*HARNESS).args(["lab", "list", "--output", "json"])).unwrap(),
    )
    .unwrap();
    let entry = listed
        .as_array()
        .and_then(|labs| labs.iter().find(|l| l["name"] == format!("lab-{n}")))
        .unwrap_or_else(|| panic!("lab-{n} is not in {listed}"));
    assert_eq!(entry["owner_pid"], up.id(), "{entry}");
    assert_eq!(entry["owner_alive"], true, "{entry}");
    assert!(entry["stale"].is_null(), "{entry}");
    assert_eq!(entry["vms"], serde_json::json!([]), "{entry}");

    let tmp = tempfile::tempdir().unwrap();
    let into = tmp.path().join("logs");
    let dir = agent::exec::run_stdout(
        Command::new(&*HARNESS)
            .args(["lab", "logs", "--lab", &lab, "--out"])
            .arg(&into),
    )
    .unwrap();
    assert_eq!(dir.trim(), into.display().to_string());
    let index = std::fs::read_to_string(into.join("index.txt")).unwrap();
    assert!(index.contains("# 4 files, 1 not collected"), "{index}");
    assert!(index.contains("FAILED: the lab runs no control plane"), "{index}");
    let record = std::fs::read_to_string(into.join("lab.json")).unwrap();
    assert!(record.contains(&format!("\"name\": \"lab-{n}\"")), "{record}");
    assert!(into.join("lab/dns-queries.log").is_file() && into.join("lab/http-requests.log").is_file());

    agent::exec::run(Command::new(&*HARNESS).args(["lab", "down", "--lab", &lab])).unwrap();
    assert!(wait_exit(&mut up).success());
    assert_nothing_left(n);
    let gone = agent::exec::run(Command::new(&*HARNESS).args(["lab", "status", "--lab", &lab])).unwrap_err();
    assert!(gone.to_string().contains("is not running"), "{gone}");
}
