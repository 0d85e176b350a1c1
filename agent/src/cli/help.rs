//! Every argument and subcommand of `unbounded-agent` has a help text (`crate::clap_help`).

use clap::CommandFactory;

#[test]
fn every_argument_and_subcommand_of_unbounded_agent_has_a_help_text() {
    let missing = crate::clap_help::undocumented(&super::Cli::command());
    assert!(
        missing.is_empty(),
        "without a help text (add a `///` line):\n  {}",
        missing.join("\n  ")
    );
}
