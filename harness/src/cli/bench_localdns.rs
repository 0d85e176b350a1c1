//! `harness bench localdns`: cached-query throughput and latency through a live LocalDNS's node
//! listener, ours with our NOTRACK rules, ours without, and bare CoreDNS, side by side, with the
//! ratios (`crate::bench::localdns`; figures in docs/perf.md).

use std::process::ExitCode;

use super::output::Output;
use crate::bench::localdns::{self, Params, report};

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of load per round (six rounds: each setup twice).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// Clients, each with one query in flight.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    threads: u32,
    /// `text` (a line per round, then each setup and the ratios) or `json` (one object: `rounds`,
    /// `setups`, `ratios`, `limits`; the round lines go to stderr meanwhile).
    #[arg(long, value_enum, default_value = "text")]
    output: Output,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let params = Params {
        seconds: args.seconds,
        threads: args.threads as usize,
    };
    let output = args.output;
    let mut first = true;
    let report = localdns::run(params, |round| {
        let mut line = round.line();
        if std::mem::take(&mut first) {
            line = format!("{}\n{line}", report::header(params.seconds, params.threads));
        }
        match output {
            Output::Text => println!("{line}"),
            Output::Json => eprintln!("{line}"),
        }
    })?;
    match output {
        Output::Text => println!("{}", report.summary_lines().join("\n")),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(ExitCode::SUCCESS)
}
