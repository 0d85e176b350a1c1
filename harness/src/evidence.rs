//! Evidence of a failed (or inspected) VM test: the serial log, QEMU's stderr and the guest's
//! journal, ruleset, addresses and machines, saved under `$LAB_ARTIFACTS_DIR/<test>/<vm>/`
//! (default `<repo>/target/lab-artifacts/`); the path and the last console lines are printed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::vm::{Vm, console};

/// Guest commands saved by default: (file name, shell command).
pub const GUEST_COMMANDS: [(&str, &str); 4] = [
    ("journal.txt", "journalctl -b --no-pager"),
    ("nft-ruleset.txt", "nft list ruleset"),
    ("ip-addr.txt", "ip -d addr"),
    ("machinectl-list.txt", "machinectl list"),
];

/// The repository root: `$REPO_ROOT`, else the parent of this crate's manifest directory.
pub fn repo_root() -> PathBuf {
    if let Some(root) = std::env::var_os("REPO_ROOT").filter(|v| !v.is_empty()) {
        return PathBuf::from(root);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// `$LAB_ARTIFACTS_DIR`, else `<repo>/target/lab-artifacts`.
pub fn artifacts_root() -> PathBuf {
    std::env::var_os("LAB_ARTIFACTS_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target").join("lab-artifacts"))
}

/// The evidence directory of `test` (its name made safe for a path: `::` becomes `.`).
pub fn test_dir(test: &str) -> PathBuf {
    artifacts_root().join(safe_name(test))
}

fn safe_name(name: &str) -> String {
    let name = name.replace("::", ".");
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe.is_empty() { "unnamed".into() } else { safe }
}

/// The running test's name: the test thread's name under libtest and nextest
/// (e.g. `vm_lifecycle::boots`), else `harness`.
pub fn current_test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => "harness".to_string(),
    }
}

/// Saves the evidence of `vm` for `test` (best effort: every failure is written down
/// instead) and prints where it went with the last console lines. Returns the directory.
pub fn collect(vm: &Vm, test: &str, reason: &str) -> PathBuf {
    collect_with(vm, test, reason, &[])
}

/// [`collect`] plus extra guest commands `(file name, shell command)`.
pub fn collect_with(vm: &Vm, test: &str, reason: &str, extra: &[(&str, &str)]) -> PathBuf {
    let dir = test_dir(test).join(vm.name());
    if let Err(err) = std::fs::create_dir_all(&dir) {
        eprintln!("error: cannot create evidence directory {}: {err}", dir.display());
        return dir;
    }
    let run = vm.run_dir();
    let note = |file: &str, text: &str| {
        if let Err(err) = std::fs::write(dir.join(file), text) {
            eprintln!("error: writing evidence {}: {err}", dir.join(file).display());
        }
    };
    note(
        "reason.txt",
        &format!(
            "{reason}\nVM {} (boot id {}, {}), run directory {}\n",
            vm.name(),
            vm.boot_id(),
            vm.accel(),
            run.dir().display()
        ),
    );
    for (from, to) in [
        (run.console(), "console.log"),
        (run.stderr(), "qemu.stderr"),
        (run.info_file(), "vm.json"),
    ] {
        if let Err(err) = std::fs::copy(&from, dir.join(to)) {
            note(
                &format!("{to}.error"),
                &format!("copying {}: {err}\n", from.display()),
            );
        }
    }
    let commands: Vec<(&str, &str)> = GUEST_COMMANDS
        .iter()
        .copied()
        .chain(extra.iter().copied())
        .collect();
    let mut unreachable: Option<String> = None;
    for (file, command) in commands {
        if let Some(why) = &unreachable {
            note(file, &format!("$ {command}\n(not run: {why})\n"));
            continue;
        }
        if !vm.is_running() {
            unreachable = Some("QEMU is not running".into());
            note(file, &format!("$ {command}\n(not run: QEMU is not running)\n"));
            continue;
        }
        match guest_command(vm, command) {
            Ok(text) => note(file, &format!("$ {command}\n{text}")),
            Err(err) => {
                note(file, &format!("$ {command}\n(failed: {err})\n"));
                unreachable = Some(format!("the guest agent did not answer `{command}`"));
            }
        }
    }
    eprintln!(
        "==> evidence of VM {} ({reason}) saved in {}\n--- last console lines ---\n{}",
        vm.name(),
        dir.display(),
        console::tail_block(&run.console(), 30)
    );
    dir
}

/// Passes `result` through, collecting `vm`'s evidence for `test` first when it is an error
/// (for test bodies that return `Result` instead of panicking).
pub fn on_error<T, E: std::fmt::Display>(vm: &Vm, test: &str, result: Result<T, E>) -> Result<T, E> {
    if let Err(err) = &result {
        collect(vm, test, &format!("failed: {err}"));
    }
    result
}

/// Runs an evidence command with short deadlines; any exit status is fine (it is recorded).
fn guest_command(vm: &Vm, command: &str) -> Result<String, String> {
    let deadlines = vm.deadlines();
    let mut session = vm
        .agent()
        .session_within(deadlines.evidence, &|| None)
        .map_err(|e| e.to_string())?;
    let out = session
        .exec(
            &crate::vm::shell(command),
            None,
            deadlines.evidence * 3 + Duration::from_secs(1),
        )
        .map_err(|e| e.to_string())?;
    Ok(format!(
        "{}\n--- stderr ---\n{}\n--- {} ---\n",
        out.stdout_text(),
        out.stderr_text(),
        out.status
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_names_become_safe_directory_names() {
        assert_eq!(
            safe_name("vm_lifecycle::reboot_gives_a_new_boot_id"),
            "vm_lifecycle.reboot_gives_a_new_boot_id"
        );
        assert_eq!(safe_name("a/b c"), "a_b_c");
        assert_eq!(safe_name(""), "unnamed");
    }

    #[test]
    fn repo_root_holds_the_workspace_manifest() {
        assert!(
            repo_root().join("Cargo.toml").is_file(),
            "{}",
            repo_root().display()
        );
    }

    #[test]
    fn current_test_name_is_the_test_threads_name() {
        assert!(current_test_name().ends_with("current_test_name_is_the_test_threads_name"));
    }
}
