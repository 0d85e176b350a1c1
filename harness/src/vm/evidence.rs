//! Evidence of a failed (or inspected) VM test: the serial log, QEMU's stderr and the guest's
//! journal, ruleset, addresses and machines, saved under `$LAB_ARTIFACTS_DIR/<test>/<vm>/`
//! (default `<repo>/target/lab-artifacts/`) with an `index.txt` ([`Collector`]); the path, the
//! last console lines and a guest kernel crash's key lines ([`kernel_crash`]) are printed.
//! `harness lab logs` collects the same per VM.

mod collector;

use std::path::PathBuf;

pub use collector::{Collector, Entry, Guest, INDEX_FILE, render_index};

use super::{RunDir, Vm, console, kernel_crash};

/// Guest commands saved by default: (file name, shell command).
pub const GUEST_COMMANDS: [(&str, &str); 5] = [
    // `--sync` first: read while journald writes (right after a resume, under load) journalctl
    // can find the file "truncated", ignore it and print no entries at all. This boot's entries
    // from every journal directory (`--merge`, which `-b` refuses): a VM resumed from the image's
    // state wrote its first lines under the saved boot's machine id.
    (
        "journal.txt",
        "journalctl --sync; journalctl --merge --no-pager _BOOT_ID=$(tr -d - </proc/sys/kernel/random/boot_id)",
    ),
    ("nft-ruleset.txt", "nft list ruleset"),
    ("ip-addr.txt", "ip -d addr"),
    ("ip-link.txt", "ip -d link"),
    ("machinectl-list.txt", "machinectl list"),
];

/// `$LAB_ARTIFACTS_DIR`, else `<repo>/target/lab-artifacts`.
pub fn artifacts_root() -> PathBuf {
    std::env::var_os("LAB_ARTIFACTS_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo::root().join("target").join("lab-artifacts"))
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
    let mut collector = match Collector::new(&dir, &format!("evidence of VM {} for {test}", vm.name())) {
        Ok(collector) => collector,
        Err(err) => {
            eprintln!("error: cannot create evidence directory {}: {err}", dir.display());
            return dir;
        }
    };
    let run = vm.run_dir();
    collector.text(
        "reason.txt",
        "why this evidence was collected",
        &format!(
            "{reason}\nVM {} (boot id {}, {}), run directory {}\n",
            vm.name(),
            vm.boot_id(),
            vm.accel(),
            run.dir().display()
        ),
    );
    let running = || vm.is_running();
    let mut guest = Guest::new(vm.agent(), &running);
    collect_vm(&mut collector, "", run, &mut guest, extra);
    let crash = kernel_crash::report(&run.console());
    let dir = collector.finish();
    eprintln!(
        "==> evidence of VM {} ({reason}) saved in {}\n--- last console lines ---\n{}{}",
        vm.name(),
        dir.display(),
        console::tail_block(&run.console(), 30),
        crash.map(|text| format!("\n{text}")).unwrap_or_default()
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

/// What a guest evidence file holds, for the index: a description of the known ones, else the
/// command (its first line, shortened).
pub fn describe(file: &str, command: &str) -> String {
    let known = match file {
        "journal.txt" => "the journal since boot (`journalctl -b`)",
        "nft-ruleset.txt" => "the nftables ruleset (`nft list ruleset`)",
        "ip-addr.txt" => "the addresses (`ip -d addr`)",
        "ip-link.txt" => "the links (`ip -d link`)",
        "machinectl-list.txt" => "the running machines (`machinectl list`)",
        "agent-start.txt" => "the stdout and stderr of `start` (/var/log/unbounded-lab/)",
        "agent-config.json" => "the agent's config",
        "install-state.json" => "the agent's install state (slot, stage)",
        "machinectl-status.txt" => "each machine's `machinectl status`",
        "host-units.txt" => "failed units, the machines' and the LocalDNS network's units",
        "machine-journal.txt" => "each machine's journal since boot (`journalctl -M <machine> -b`)",
        "machine-units.txt" => "each machine's failed and loaded units",
        "kubelet-journal.txt" => "kubelet's journal in each machine",
        "containerd-journal.txt" => "containerd's journal in each machine",
        "localdns-journal.txt" => "localdns.service's journal in each machine",
        _ => {
            let line = command.lines().next().unwrap_or_default();
            let short: String = line.chars().take(60).collect();
            let more = if short.len() < command.len() { "..." } else { "" };
            return format!("`{short}{more}`");
        }
    };
    known.to_string()
}

/// Collects a VM's own evidence under `prefix` (`""` or `"<vm>/"`): its run directory's console,
/// QEMU's stderr and `vm.json`, `kernel-crash.txt` when the console shows a guest kernel crash
/// ([`kernel_crash`]), then [`GUEST_COMMANDS`] and `extra` in the guest.
pub fn collect_vm(
    collector: &mut Collector,
    prefix: &str,
    run: &RunDir,
    guest: &mut Guest<'_>,
    extra: &[(&str, &str)],
) {
    for (from, to, what) in [
        (run.console(), "console.log", "the VM's serial console (ttyS0)"),
        (run.stderr(), "qemu.stderr", "QEMU's stdout and stderr"),
        (
            run.info_file(),
            "vm.json",
            "what was booted (image, accelerator, overlay)",
        ),
    ] {
        collector.copy_file(&format!("{prefix}{to}"), what, &from);
    }
    if let Some(text) = kernel_crash::report(&run.console()) {
        collector.text(
            &format!("{prefix}kernel-crash.txt"),
            "the guest kernel crashed: its report's key lines in console.log",
            &text,
        );
    }
    let commands: Vec<(&str, &str)> = GUEST_COMMANDS
        .iter()
        .copied()
        .chain(extra.iter().copied())
        .collect();
    for (file, command) in commands {
        let what = format!("{} in VM {}", describe(file, command), guest.agent.vm());
        collector.guest(guest, &format!("{prefix}{file}"), &what, command);
    }
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
    fn every_guest_evidence_file_has_a_description_and_others_show_their_command() {
        let node = crate::deploy::evidence::node_commands();
        for (file, command) in GUEST_COMMANDS
            .iter()
            .copied()
            .chain(node.iter().map(|(f, c)| (*f, c.as_str())))
        {
            assert!(
                !describe(file, command).starts_with('`'),
                "{file} has no description"
            );
        }
        assert_eq!(describe("x.txt", "uname -a"), "`uname -a`");
        assert!(describe("x.txt", &"y".repeat(70)).ends_with("...`"));
    }

    #[test]
    fn current_test_name_is_the_test_threads_name() {
        assert!(current_test_name().ends_with("current_test_name_is_the_test_threads_name"));
    }
}
