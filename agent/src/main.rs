//! `unbounded-agent`: the command line of the node agent.
//!
//! The command line is `agent::cli` (one file per subcommand under `src/cli/`, each returning
//! the process exit code).

use std::process::ExitCode;

use agent::cli::Cli;
use clap::Parser as _;

fn main() -> ExitCode {
    // Installed in the machine as the LocalDNS supervisor, the agent is that program.
    let argv0 = std::env::args().next().unwrap_or_default();
    if agent::machine::supervisor_entry::invoked_as_supervisor(&argv0) {
        return agent::machine::supervisor_entry::main();
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let result = Cli::parse().run();
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
