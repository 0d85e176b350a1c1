//! `--output text|json`, for the commands whose result a script reads.

/// How a command prints its result.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON document on stdout.
    Json,
}

/// Prints `value` as pretty JSON.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
