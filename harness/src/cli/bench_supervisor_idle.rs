//! `harness bench supervisor-idle`: the LocalDNS supervisor's CPU on an idle node with its
//! hung-CoreDNS queue rule on and off, with few and many sockets, and the cost of one look
//! (`crate::bench::supervisor_idle`; figures in docs/perf.md).

use std::process::ExitCode;

use super::output::Output;
use crate::bench::supervisor_idle::{self, Params, header};

#[derive(clap::Args)]
pub struct Args {
    /// Seconds per round (four rounds, each after a 2 s settle).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// TCP sockets opened in the node's namespace for the second pair of rounds.
    #[arg(long, default_value_t = 2000)]
    sockets: u32,
    /// `text` (a line per round and per look) or `json` (one object: `rounds`, `looks`; the
    /// round lines go to stderr meanwhile).
    #[arg(long, value_enum, default_value = "text")]
    output: Output,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let params = Params {
        seconds: args.seconds,
        sockets: args.sockets as usize,
    };
    let output = args.output;
    let mut first = true;
    let report = supervisor_idle::run(params, |round| {
        let mut line = round.line(params.seconds);
        if std::mem::take(&mut first) {
            line = format!("{}\n{line}", header(params.seconds));
        }
        match output {
            Output::Text => println!("{line}"),
            Output::Json => eprintln!("{line}"),
        }
    })?;
    match output {
        Output::Text => println!("{}", report.look_lines().join("\n")),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(ExitCode::SUCCESS)
}
