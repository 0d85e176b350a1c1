//! `unbounded-agent preflight --config FILE [--output text|json]`: the checks of
//! `agent::preflight::CHECKS`; exit 1 when any check not ignored is an error.

use std::path::PathBuf;
use std::process::ExitCode;

use agent::preflight::{CHECKS, Context, Severity};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(clap::Args)]
pub struct Args {
    /// The agent config JSON.
    #[arg(long)]
    pub config: PathBuf,
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
    /// Names of checks whose failures do not fail the run (repeatable).
    #[arg(long = "ignore", value_name = "CHECK")]
    pub ignore: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = super::validate::load(&args.config)?;
    let ctx = Context {
        config_path: args.config.clone(),
        config,
    };
    let report = agent::preflight::run(CHECKS, &ctx, &args.ignore);
    match args.output {
        Output::Text => print!("{}", report.to_text()),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(if report.status == Severity::Error {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
