//! `unbounded-agent preflight --config FILE [--output text|json]`: the checks of
//! `crate::preflight::CHECKS`; exit 1 when any check not ignored is an error.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::preflight::{CHECKS, Context, Severity};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Output {
    /// One line per finding (`<severity> <check> [<target>]: <message>`), then `<status>: <summary>`.
    Text,
    /// `{status, checks[{name,target,severity,message,ignored}], summary}`.
    Json,
}

#[derive(clap::Args)]
pub struct Args {
    /// The agent config JSON.
    #[arg(long)]
    pub config: PathBuf,
    /// How to print the report.
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
    /// A check whose failures do not fail the run (repeatable); one of the check names.
    #[arg(long = "ignore", value_name = "CHECK", value_parser = check_names())]
    pub ignore: Vec<String>,
}

/// `--ignore` takes only the names of [`CHECKS`]; anything else is refused listing them.
pub fn check_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(CHECKS.iter().map(|c| c.name))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = super::validate::load(&args.config)?;
    let ctx = Context {
        config_path: args.config.clone(),
        config,
    };
    let report = crate::preflight::run(CHECKS, &ctx, &args.ignore);
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
