//! The command line of `harness` ([`Cli`], what docs and tests parse command lines with) and
//! one module per command group.

pub mod bench;
pub mod bench_cluster;
pub mod bench_localdns;
pub mod bench_node;
pub mod bench_suite;
pub mod bench_supervisor_idle;
pub mod images;
pub mod lab;
pub mod lab_arg;
pub mod lab_detach;
pub mod lab_inspect;
pub mod lab_kubectl;
pub mod output;
pub mod vm;
pub mod vm_copy_tree;

#[cfg(test)]
mod help;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "harness",
    version,
    about = "Builds the lab's images, runs a lab and boots QEMU VMs that join it"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Build and list the cached images and artifacts.
    #[command(subcommand)]
    Images(images::Command),
    /// Run a lab (network namespace, services, VMs) and tear it down.
    #[command(subcommand)]
    Lab(lab::Command),
    /// Reach a VM of the running lab: run commands, copy files, open a shell.
    #[command(subcommand)]
    Vm(vm::Command),
    /// Measure the lab on this machine (VM start cold and resumed, reboot, commands, memory) and
    /// LocalDNS on this host (throughput with and without NOTRACK, the supervisor idle).
    #[command(subcommand)]
    Bench(bench::Command),
}

/// Why a command stops at once when its user is not root (`None`: it may run).
pub fn refuse_without_root(command: &Command, euid_is_root: bool) -> Option<String> {
    let without_root = matches!(command, Command::Bench(bench::Command::Suite(_)));
    (!euid_is_root && !without_root).then(|| {
        "harness must run as root: it makes network namespaces, taps, nftables rules, containers \
         and QEMU VMs, and keeps its images in root's cache (run it with `sudo -E`, which keeps \
         CARGO_TARGET_DIR and the LAB_* settings)"
            .to_string()
    })
}

impl Cli {
    /// Runs the parsed command; its exit code, or the error to print. A command that needs root
    /// stops at once, in one line, without it ([`refuse_without_root`]).
    pub fn run(self) -> anyhow::Result<ExitCode> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        if let Some(why) = refuse_without_root(&self.command, root) {
            anyhow::bail!(why);
        }
        match self.command {
            Command::Images(cmd) => images::run(cmd),
            Command::Lab(cmd) => lab::run(cmd),
            Command::Vm(cmd) => vm::run(cmd),
            Command::Bench(cmd) => bench::run(cmd),
        }
    }
}

#[cfg(test)]
mod root_tests {
    use super::*;

    fn command(args: &[&str]) -> Command {
        let mut argv = vec!["harness"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).unwrap().command
    }

    #[test]
    fn every_command_but_bench_suite_needs_root() {
        for args in [
            &["lab", "list"][..],
            &["lab", "up"],
            &["images", "list"],
            &["vm", "exec", "n1", "--", "true"],
            &["bench", "vm"],
            &["bench", "localdns"],
            &["bench", "supervisor-idle"],
        ] {
            let why = refuse_without_root(&command(args), false)
                .unwrap_or_else(|| panic!("{args:?} ran without root"));
            assert!(why.contains("must run as root") && !why.contains('\n'), "{why}");
            assert_eq!(
                refuse_without_root(&command(args), true),
                None,
                "{args:?} as root"
            );
        }
        assert_eq!(refuse_without_root(&command(&["bench", "suite"]), false), None);
    }
}
