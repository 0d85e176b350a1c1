//! `LAB_KEEP=1` on a failed test (docs/lab.md, "Keep a failed scenario's lab"): the lab and its
//! VM stay up, the notice names the commands to look at them, those commands work from another
//! process, and `harness lab down --lab N` ends the hold and leaves nothing behind. The failed
//! test is this one: it holds its lab the way a failing scenario does ([`keep::hold`]).
//!
//! Needs the host image (`harness images build`) and root.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use harness::cache::Cache;
use harness::lab::{Lab, LabSpec, keep, owner};
use harness::netns;
use harness::vm::{BootImage, Vm};

static HARNESS: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| agent::test_binary!("harness"));

fn harness(args: &[&str]) -> String {
    agent::exec::run_stdout(Command::new(&*HARNESS).args(args)).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits for the hold's notice in `<evidence>/kept.txt`.
fn notice(evidence: &Path) -> String {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(evidence.join("kept.txt")) {
            return text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no kept.txt in {} within 60 s",
            evidence.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// From another process, as a person would: the notice's commands (no kubectl line: this lab runs no
/// control plane), then `lab down`.
fn look_then_take_down(number: u8, evidence: &Path) -> Child {
    let n = number.to_string();
    let text = notice(evidence);
    for line in [
        format!("harness vm shell localdns --lab {n}"),
        format!("harness vm exec localdns --lab {n} -- "),
        format!("harness lab down --lab {n}"),
        format!("evidence:  {}", evidence.display()),
        "a deliberate failure".to_string(),
    ] {
        assert!(text.contains(&line), "the notice lacks {line:?}:\n{text}");
    }
    let kernel = harness(&["vm", "exec", "localdns", "--lab", &n, "--", "uname", "-r"]);
    assert!(!kernel.trim().is_empty(), "`vm exec` printed nothing");
    let status: serde_json::Value =
        serde_json::from_str(&harness(&["lab", "status", "--lab", &n, "--output", "json"])).unwrap();
    assert_eq!(status["owner"]["pid"], std::process::id(), "{status}");
    assert_eq!(status["vms"][0]["name"], "localdns", "{status}");
    Command::new(&*HARNESS)
        .args(["lab", "down", "--lab", &n])
        .spawn()
        .expect("starting `harness lab down`")
}

#[test]
fn a_kept_lab_answers_the_notices_commands_until_lab_down_removes_it() {
    let cache = Cache::open().expect("opening the lab cache");
    let image = harness::images::host::require(&cache)
        .unwrap_or_else(|e| panic!("{}", agent::error_chain::Chain(&e)));
    let lab = Lab::start(LabSpec::for_test("vm_lab_keep")).unwrap_or_else(|e| panic!("{e}"));
    let number = lab.number();
    let name = format!("lab-{number}");
    let spec = lab.vm_spec("localdns", BootImage::from(&image)).unwrap();
    let vm = Vm::boot(spec).unwrap_or_else(|e| panic!("booting VM localdns: {e:?}"));
    let evidence = tempfile::tempdir().unwrap();

    let dir = evidence.path().to_path_buf();
    let looker = std::thread::spawn(move || {
        let looked = std::panic::catch_unwind(|| look_then_take_down(number, &dir));
        if looked.is_err() {
            // A failed check must not leave the hold waiting for a `lab down` that never comes.
            let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGTERM);
        }
        looked.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    // Blocks until `lab down` (run by the looker) signals this process.
    keep::hold(
        &lab,
        &[vm.name()],
        "a deliberate failure\nsecond line",
        evidence.path(),
    );
    let mut down = looker
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));

    vm.shutdown().unwrap();
    lab.shutdown().unwrap();
    assert!(down.wait().unwrap().success(), "`harness lab down` failed");
    assert!(!netns::exists(&name), "namespace {name} survived");
    assert!(!owner::run_dir(&name).exists(), "{name}'s run directory survived");
    assert!(
        !owner::state_dir(&name).exists(),
        "{name}'s state directory survived"
    );
}
