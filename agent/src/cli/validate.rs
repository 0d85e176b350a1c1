//! `unbounded-agent validate --config FILE`: exit 0, or exit 2 printing one line per problem.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// Exit code for an invalid config (as opposed to 1 for "could not even check").
pub const INVALID: u8 = 2;

#[derive(clap::Args)]
pub struct Args {
    /// The agent config JSON.
    #[arg(long)]
    pub config: PathBuf,
    /// `json`: `{"valid": bool, "problems": [{"path", "message"}]}` on stdout.
    #[arg(long, value_enum, default_value_t = super::output::Output::Text)]
    pub output: super::output::Output,
}

/// What `--output json` prints.
#[derive(serde::Serialize)]
struct Report<'a> {
    valid: bool,
    problems: Vec<ProblemJson<'a>>,
}

#[derive(serde::Serialize)]
struct ProblemJson<'a> {
    path: &'a str,
    message: &'a str,
}

/// Reads and validates a config file; `Ok(Err(problems))` for an invalid one.
pub fn load(
    path: &std::path::Path,
) -> anyhow::Result<Result<crate::validate::Config, crate::validate::Problems>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read config {}", path.display()))?;
    Ok(crate::validate::parse(&text))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let result = load(&args.config)?;
    if args.output == super::output::Output::Json {
        let problems = match &result {
            Ok(_) => Vec::new(),
            Err(problems) => problems
                .iter()
                .map(|p| ProblemJson {
                    path: &p.path,
                    message: &p.message,
                })
                .collect(),
        };
        super::output::print_json(&Report {
            valid: result.is_ok(),
            problems,
        })?;
    } else if let Err(problems) = &result {
        for p in problems.iter() {
            println!("{p}");
        }
    }
    Ok(if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(INVALID)
    })
}
