//! Evidence of a node deployment: the VM's own (console, journal, nft, addresses) plus the
//! agent config, `start`'s output, the install state, the machines' status and the journals of
//! every machine (whole, kubelet, containerd, localdns).

use std::path::{Path, PathBuf};

use crate::vm::Vm;

/// Where `start`'s output and its start time are kept in the VM (written by the harness).
pub const GUEST_LOG_DIR: &str = "/var/log/unbounded-lab";
pub const GUEST_START_STDOUT: &str = "/var/log/unbounded-lab/start.stdout";
pub const GUEST_START_STDERR: &str = "/var/log/unbounded-lab/start.stderr";

/// Runs `$1` for each machine directory under /var/lib/machines (`$m` is its name).
fn each_machine(body: &str) -> String {
    format!(
        "for d in /var/lib/machines/*/; do [ -d \"$d\" ] || continue; m=$(basename \"$d\"); \
         echo \"=== machine $m\"; {body}; done"
    )
}

/// Guest commands saved on top of [`crate::vm::evidence::GUEST_COMMANDS`]: (file name, command).
pub fn node_commands() -> Vec<(&'static str, String)> {
    let unit_journal = |unit: &str| {
        each_machine(&format!(
            "journalctl -M \"$m\" -b -u {unit} --no-pager 2>&1 | tail -n 2000"
        ))
    };
    vec![
        (
            "agent-start.txt",
            format!(
                "echo '--- stdout ---'; cat {GUEST_START_STDOUT}; echo '--- stderr ---'; cat {GUEST_START_STDERR}"
            ),
        ),
        (
            "agent-config.json",
            format!("cat {}", agent::paths::OPERATOR_CONFIG),
        ),
        (
            "install-state.json",
            format!("cat {}", agent::paths::INSTALL_STATE),
        ),
        (
            "machinectl-status.txt",
            format!(
                "machinectl list --all --no-pager; {}",
                each_machine("machinectl status --no-pager \"$m\" 2>&1")
            ),
        ),
        (
            "host-units.txt",
            "systemctl --failed --no-pager; systemctl status --no-pager --lines=50 \
             'systemd-nspawn@*' unbounded-localdns-network.service 2>&1"
                .into(),
        ),
        (
            "machine-journal.txt",
            each_machine(
                "journalctl -M \"$m\" -b --no-pager 2>&1 | tail -n 5000 || \
                 journalctl -D \"$d/var/log/journal\" --no-pager 2>&1 | tail -n 5000",
            ),
        ),
        (
            "machine-units.txt",
            each_machine(
                "systemctl -M \"$m\" --failed --no-pager; systemctl -M \"$m\" list-units --no-pager",
            ),
        ),
        ("kubelet-journal.txt", unit_journal("kubelet")),
        ("containerd-journal.txt", unit_journal("containerd")),
        ("localdns-journal.txt", unit_journal("localdns")),
    ]
}

/// Saves `vm`'s evidence with the node's extras under `$LAB_ARTIFACTS_DIR/<test>/<vm>/`, plus
/// `files` written by the harness (e.g. `start.stdout`); returns the directory.
pub fn collect(vm: &Vm, test: &str, reason: &str, files: &[(&str, &str)]) -> PathBuf {
    let commands = node_commands();
    let extra: Vec<(&str, &str)> = commands.iter().map(|(f, c)| (*f, c.as_str())).collect();
    let dir = crate::vm::evidence::collect_with(vm, test, reason, &extra);
    write_files(&dir, files);
    dir
}

fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        if let Err(err) = std::fs::write(dir.join(name), text) {
            eprintln!("error: writing evidence {}: {err}", dir.join(name).display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_evidence_covers_the_machine_journal_kubelet_and_machinectl_status() {
        let commands = node_commands();
        let names: Vec<&str> = commands.iter().map(|(f, _)| *f).collect();
        for want in [
            "agent-start.txt",
            "machinectl-status.txt",
            "machine-journal.txt",
            "kubelet-journal.txt",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        let kubelet = &commands
            .iter()
            .find(|(f, _)| *f == "kubelet-journal.txt")
            .unwrap()
            .1;
        assert!(
            kubelet.contains("journalctl -M \"$m\" -b -u kubelet"),
            "{kubelet}"
        );
        // Evidence file names never clash with the VM's own.
        for (name, _) in crate::vm::evidence::GUEST_COMMANDS {
            assert!(!names.contains(&name), "{name} clashes");
        }
    }

    #[test]
    fn each_machine_runs_its_body_with_the_machine_name_in_m() {
        let script = each_machine("echo \"$m\"");
        let dir = tempfile::tempdir().unwrap();
        let script = script.replace("/var/lib/machines", &dir.path().display().to_string());
        std::fs::create_dir_all(dir.path().join("kube1")).unwrap();
        let out = agent::exec::run_stdout(std::process::Command::new("sh").args(["-c", &script])).unwrap();
        assert_eq!(out, "=== machine kube1\nkube1\n");
    }
}
