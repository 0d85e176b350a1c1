//! `harness`: build the lab's images, run a lab, and reach its VMs.
//!
//! Each command group lives in its own file under `src/cli/`.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "harness",
    version,
    about = "Builds the lab's images, runs a lab and boots QEMU VMs that join it"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build and list the cached images and artifacts.
    #[command(subcommand)]
    Images(cli::images::Command),
    /// Run a lab (network namespace, services, VMs) and tear it down.
    #[command(subcommand)]
    Lab(cli::lab::Command),
    /// Reach a VM of the running lab: run commands, copy files, open a shell.
    #[command(subcommand)]
    Vm(cli::vm::Command),
    /// Measure the lab on this machine (VM start cold and resumed, reboot, commands, memory).
    #[command(subcommand)]
    Bench(cli::bench::Command),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let result = match Cli::parse().command {
        Command::Images(cmd) => cli::images::run(cmd),
        Command::Lab(cmd) => cli::lab::run(cmd),
        Command::Vm(cmd) => cli::vm::run(cmd),
        Command::Bench(cmd) => cli::bench::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
