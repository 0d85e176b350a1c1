//! `unbounded-agent start --config FILE`: preflight, host preparation, the machine with
//! containerd, kubelet and LocalDNS, started in the order of docs/design.md §9 (the `start`
//! operation of `crate::lifecycle`). Exit 0 once kubelet is active in the machine; 1 with the
//! reason otherwise.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::lifecycle::{Operation, Options};

use super::lifecycle::{Common, print_outcome, progress_lines};

#[derive(clap::Args)]
pub struct Args {
    /// The agent config JSON.
    #[arg(long)]
    pub config: PathBuf,
    /// A preflight check whose failures do not stop `start` (repeatable); one of the check names.
    #[arg(long = "ignore-preflight", value_name = "CHECK", value_parser = super::preflight::check_names())]
    pub ignore: Vec<String>,
    #[command(flatten)]
    pub common: Common,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = Options {
        config_path: Some(args.config),
        root: args.common.root,
        ignore_checks: args.ignore,
        timeout_scale: args.common.timeout_scale,
        dry_run: false,
    };
    let outcome = crate::lifecycle::run(Operation::Start, &options, &progress_lines())?;
    print_outcome(&outcome);
    Ok(ExitCode::SUCCESS)
}
