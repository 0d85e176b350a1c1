//! `harness`: build the lab's images, run a lab, and reach its VMs.
//!
//! The command line is `harness::cli` (one file per command group under `src/cli/`).

use std::process::ExitCode;

use clap::Parser as _;
use harness::cli::Cli;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let result = Cli::parse().run();
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
