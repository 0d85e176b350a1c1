//! `unbounded-agent status [--output json]`: the node on this host (install, the operation under
//! way and the last one finished, LocalDNS on both listeners); exit 1 when something is wrong.

use std::path::PathBuf;
use std::process::ExitCode;

use super::output::{Output, print_json};
use crate::node_status::{gather, to_text};

#[derive(clap::Args)]
pub struct Args {
    /// `json`: the whole report as one JSON document (install, localDns, problems).
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// The directory the agent's records are read below (tests only).
    #[arg(long, env = "UNBOUNDED_AGENT_ROOT", default_value = "/", hide = true)]
    pub root: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let status = gather(&args.root);
    match args.output {
        Output::Text => print!("{}", to_text(&status)),
        Output::Json => print_json(&status)?,
    }
    Ok(if status.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
