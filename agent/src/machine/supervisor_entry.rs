//! The LocalDNS supervisor as installed in the machine: `start` copies the running agent binary to
//! `/usr/local/libexec/unbounded-localdns-supervisor`, and the agent, started under that name,
//! runs [`main`] (the same as the `unbounded-localdns-supervisor` binary). One file to deploy.
//! With [`BEFORE_STOP`] or [`AFTER_START`] as its argument it bridges a restart of
//! `localdns.service` instead (`supervisor::restart_bridge`; the unit's `ExecStop=` and
//! `ExecStartPost=`). With `spare <supervisor's runtime directory>` it is the spare
//! (`supervisor::spare`, `localdns-spare.service`).

use std::process::ExitCode;

use crate::supervisor::restart_bridge::{self, AFTER_START, BEFORE_STOP};
use crate::supervisor::spare::{self, keep_spare};
use crate::supervisor::{Settings, supervise};

/// The program name the supervisor is installed under.
pub const PROGRAM: &str = "unbounded-localdns-supervisor";

/// True when `argv0`'s file name is [`PROGRAM`].
pub fn invoked_as_supervisor(argv0: &str) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == PROGRAM)
}

/// Runs the supervisor: settings from the environment, CoreDNS supervised until it ends.
pub fn main() -> ExitCode {
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
            eprintln!("{PROGRAM}: {err}");
            return ExitCode::from(2);
        }
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut spare_of = None;
    let bridge = match args.first().map(String::as_str) {
        None => None,
        Some(spare::ARG) => match args.get(1) {
            Some(dir) => {
                spare_of = Some(std::path::PathBuf::from(dir));
                None
            }
            None => {
                eprintln!(
                    "{PROGRAM}: {} needs the supervisor's runtime directory (/run/localdns)",
                    spare::ARG
                );
                return ExitCode::from(2);
            }
        },
        Some(BEFORE_STOP) => Some(restart_bridge::before_stop(&settings.listeners())),
        Some(AFTER_START) => Some(restart_bridge::after_start(&settings.listeners())),
        Some(other) => {
            eprintln!(
                "{PROGRAM}: unknown argument {other:?} (none, {BEFORE_STOP}, {AFTER_START} or {} <dir>)",
                spare::ARG
            );
            return ExitCode::from(2);
        }
    };
    if let Some(outcome) = bridge {
        return match outcome {
            Ok(done) => {
                eprintln!("{PROGRAM}: {done}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("{PROGRAM}: bridging the restart of localdns.service: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("{PROGRAM}: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = match &spare_of {
        Some(dir) => {
            let hold = match spare::hold_from(std::env::var(spare::HOLD_VAR).ok().as_deref()) {
                Ok(hold) => hold,
                Err(err) => {
                    eprintln!("{PROGRAM}: {err}");
                    return ExitCode::from(2);
                }
            };
            runtime.block_on(keep_spare(&settings, dir, hold))
        }
        None => runtime.block_on(supervise(&settings)),
    };
    match outcome {
        Ok(outcome) => {
            tracing::info!(?outcome, code = outcome.exit_code(), "supervisor ends");
            ExitCode::from(outcome.exit_code())
        }
        Err(err) => {
            eprintln!("{PROGRAM}: {err}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_supervisors_file_name_counts() {
        assert!(invoked_as_supervisor(
            "/usr/local/libexec/unbounded-localdns-supervisor"
        ));
        assert!(!invoked_as_supervisor("/usr/local/bin/unbounded-agent"));
        assert!(!invoked_as_supervisor("unbounded-localdns-supervisor-old"));
    }
}
