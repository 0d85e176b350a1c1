//! A failed test's lab kept for a look (`LAB_KEEP=1`): instead of tearing its lab and VMs down,
//! the failing test prints how to reach them (a shell in each VM, the kubeconfig, the status and
//! logs commands, `harness lab down --lab N`) and stays alive holding them, like
//! `harness lab up`, until `harness lab down --lab N` (SIGTERM), Ctrl-C or nextest's timeout;
//! then it tears down as usual.
//!
//! The test process stays the lab's owner: its VMs' QEMU processes and the lab's DNS and
//! artifact servers live and die with it, so no other process could take them over, and the
//! stale-lab sweep leaves a lab whose owner is alive alone.

use std::io::Write;
use std::path::Path;

use super::Lab;
use super::signals;

/// Whether a failed test keeps its lab: `LAB_KEEP` is `1`.
pub fn keep_on_failure() -> bool {
    decide(std::env::var("LAB_KEEP").ok().as_deref())
}

/// The keep decision for a value of `LAB_KEEP` (only `1` keeps).
pub fn decide(value: Option<&str>) -> bool {
    value == Some("1")
}

/// What a person needs to look at a kept lab `number` with `vms`, whose failure is described by
/// `error` and whose evidence is in `evidence`.
pub fn how_to_look(
    number: u8,
    vms: &[&str],
    kubeconfig: Option<&Path>,
    error: &str,
    evidence: &Path,
) -> String {
    let mut text = format!(
        "\n==> LAB_KEEP=1: the test failed; lab-{number} and its VMs stay up for a look (owner pid {}).\n\
         \x20 error:     {}\n\
         \x20 evidence:  {}\n",
        std::process::id(),
        error.lines().next().unwrap_or_default(),
        evidence.display()
    );
    for vm in vms {
        text += &format!(
            "  shell:     harness vm shell {vm} --lab {number}        (leave with Ctrl-])\n\
             \x20 command:   harness vm exec {vm} --lab {number} -- systemctl --machine=kube1 status localdns kubelet\n"
        );
    }
    if let Some(kubeconfig) = kubeconfig {
        text += &format!(
            "  kubectl:   harness lab kubectl --lab {number} -- get nodes -o wide   (or KUBECONFIG={})\n",
            kubeconfig.display()
        );
    }
    text += &format!(
        "  status:    harness lab status --lab {number}\n\
         \x20 logs:      harness lab logs --lab {number}\n\
         \x20 remove it: harness lab down --lab {number}   (or Ctrl-C here)\n"
    );
    text
}

/// Holds `lab` (with its VMs, which the caller keeps alive) until a stop signal: prints
/// [`how_to_look`] on stderr and on the terminal (nextest captures a test's output), and writes
/// it to `<evidence>/kept.txt` atomically (a reader never sees it half written).
pub fn hold(lab: &Lab, vms: &[&str], error: &str, evidence: &Path) {
    let stop = signals::subscribe();
    let kubeconfig = lab.cluster().map(|c| c.admin_kubeconfig.clone());
    let text = how_to_look(lab.number(), vms, kubeconfig.as_deref(), error, evidence);
    eprintln!("{text}");
    if let Ok(mut tty) = std::fs::OpenOptions::new().write(true).open("/dev/tty") {
        let _ = tty.write_all(text.replace('\n', "\r\n").as_bytes());
    }
    if let Err(err) = agent::files::write_atomic(&evidence.join("kept.txt"), text.as_bytes(), 0o644) {
        eprintln!("error: writing {}: {err}", evidence.join("kept.txt").display());
    }
    let signal = stop.wait();
    eprintln!("==> signal {signal}: tearing down the kept {}", lab.name());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lab_keep_1_keeps_a_failed_lab() {
        assert!(decide(Some("1")));
        for other in [None, Some("0"), Some(""), Some("yes"), Some("true")] {
            assert!(!decide(other), "{other:?}");
        }
    }

    #[test]
    fn the_notice_names_the_shell_kubeconfig_and_lab_down_for_that_lab() {
        let text = how_to_look(
            7,
            &["localdns"],
            Some(Path::new("/run/unbounded-lab/lab-7/kubeconfig")),
            "Node localdns was not Ready\nmore",
            Path::new("/t/lab-artifacts/bootstrap"),
        );
        for part in [
            "lab-7 and its VMs stay up",
            "error:     Node localdns was not Ready\n",
            "evidence:  /t/lab-artifacts/bootstrap",
            "harness vm shell localdns --lab 7",
            "KUBECONFIG=/run/unbounded-lab/lab-7/kubeconfig",
            "harness lab status --lab 7",
            "harness lab logs --lab 7",
            "harness lab down --lab 7",
        ] {
            assert!(text.contains(part), "{part:?} missing in:\n{text}");
        }
    }
}
