//! `--output` of the commands that print facts: `text` for people, `json` for scripts.

/// How a command prints what it found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON value (its shape in the docs of the command).
    Json,
}
