//! Every argument and subcommand of `harness` has a help text (`agent::clap_help`).

use clap::CommandFactory;

#[test]
fn every_argument_and_subcommand_of_harness_has_a_help_text() {
    let missing = agent::clap_help::undocumented(&super::Cli::command());
    assert!(
        missing.is_empty(),
        "without a help text (add a `///` line):\n  {}",
        missing.join("\n  ")
    );
}
