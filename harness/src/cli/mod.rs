//! The command line of `harness` ([`Cli`], what docs and tests parse command lines with) and
//! one module per command group.

pub mod bench;
pub mod bench_node;
pub mod bench_suite;
pub mod images;
pub mod lab;
pub mod lab_arg;
pub mod lab_inspect;
pub mod lab_kubectl;
pub mod vm;

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
    /// Measure the lab on this machine (VM start cold and resumed, reboot, commands, memory).
    #[command(subcommand)]
    Bench(bench::Command),
}

impl Cli {
    /// Runs the parsed command; its exit code, or the error to print.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.command {
            Command::Images(cmd) => images::run(cmd),
            Command::Lab(cmd) => lab::run(cmd),
            Command::Vm(cmd) => vm::run(cmd),
            Command::Bench(cmd) => bench::run(cmd),
        }
    }
}
