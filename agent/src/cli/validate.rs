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
    match load(&args.config)? {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(problems) => {
            for p in problems.iter() {
                println!("{p}");
            }
            Ok(ExitCode::from(INVALID))
        }
    }
}
