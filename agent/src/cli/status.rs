//! `unbounded-agent status [--output json]`: the node on this host (install, the operation under
//! way and the last one finished, LocalDNS on both listeners); exit 1 when something is wrong.

use std::path::PathBuf;
use std::process::ExitCode;

use super::output::{Output, print_json};
use crate::node_status::{gather, localdns_status_line, to_text};

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
    // The machine's units are asked only on the real host (not below a test's root).
    let on_this_host = args.root == std::path::Path::new("/");
    let status = gather(&args.root, &|slot| {
        on_this_host.then(|| localdns_status_line(slot)).flatten()
    });
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
