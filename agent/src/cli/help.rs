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

/// `--timeout-scale`'s help states the waits and the emulated default the code uses.
#[test]
fn the_timeout_scale_help_states_the_waits_and_the_default_the_code_uses() {
    use crate::start::node::{CONTAINERD_TIMEOUT, EMULATED_SCALE, KUBELET_TIMEOUT, LOCALDNS_READY_TIMEOUT};
    let cli = super::Cli::command();
    let start = cli.find_subcommand("start").expect("start");
    let help = start
        .get_arguments()
        .find(|a| a.get_id() == "timeout_scale")
        .and_then(|a| a.get_help())
        .expect("--timeout-scale has a help text")
        .to_string();
    let secs = |d: std::time::Duration| d.as_secs();
    for said in [
        format!(
            "machine answering {} s",
            secs(crate::machine::machinectl::READY_TIMEOUT)
        ),
        format!("LocalDNS ready {} s", secs(LOCALDNS_READY_TIMEOUT)),
        format!(
            "containerd and kubelet active {} s each",
            secs(CONTAINERD_TIMEOUT)
        ),
        format!("Default: {EMULATED_SCALE} when"),
    ] {
        assert!(help.contains(&said), "{said:?} not in {help:?}");
    }
    assert_eq!(
        CONTAINERD_TIMEOUT, KUBELET_TIMEOUT,
        "the help says one figure for both"
    );
}
