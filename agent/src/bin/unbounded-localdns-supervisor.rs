//! `unbounded-localdns-supervisor`: runs CoreDNS inside the machine and reports its health to systemd.
//! Takes no arguments; settings come from the environment (spec §7, `agent::supervisor`).

use std::process::ExitCode;

use agent::supervisor::{Settings, supervise};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(err) => {
            eprintln!("unbounded-localdns-supervisor: {err}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("unbounded-localdns-supervisor: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(supervise(&settings)) {
        Ok(outcome) => {
            tracing::info!(?outcome, code = outcome.exit_code(), "supervisor ends");
            ExitCode::from(outcome.exit_code())
        }
        Err(err) => {
            eprintln!("unbounded-localdns-supervisor: {err}");
            ExitCode::FAILURE
        }
    }
}
