//! `kubectl-unbounded`: the kubectl plugin (`kubectl unbounded machine manual-bootstrap ...`,
//! `kubectl unbounded machine daemon-access ...`).
//! The script goes to stdout, a note on the token to stderr; an error is one line on stderr
//! and exit 1.

use std::io::Write as _;
use std::process::ExitCode;

use agent::manual_bootstrap::cli::{Cli, Command, MachineCommand};
use clap::Parser as _;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let Command::Machine { command } = cli.command;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let args = match command {
        MachineCommand::ManualBootstrap(args) => args,
        MachineCommand::DaemonAccess(args) => {
            let yaml = runtime.block_on(agent::manual_bootstrap::daemon_access(&args.machine))?;
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(yaml.as_bytes())?;
            stdout.flush()?;
            return Ok(());
        }
    };
    let outcome = runtime.block_on(agent::manual_bootstrap::run(&args))?;
    eprintln!("{}", outcome.token_note);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(outcome.script.as_bytes())?;
    stdout.flush()?;
    Ok(())
}
