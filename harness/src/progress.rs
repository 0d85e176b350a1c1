//! Progress for long work: a spinner on a terminal, a line every 30 s elsewhere (CI), and
//! [`Step::line`] for events worth a line of their own (a stage of `start`, a component up).
//!
//! [`run_logged`] runs a build command with its output sent to a log file
//! while showing the elapsed time and the log's last line; a failure carries
//! the command, its status and the log's tail.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use agent::exec::CommandLine;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// Every spinner of the process, so that steps running side by side (image builds in two
/// lanes) each keep a line of their own on a terminal.
fn spinners() -> &'static MultiProgress {
    static SPINNERS: OnceLock<MultiProgress> = OnceLock::new();
    SPINNERS.get_or_init(MultiProgress::new)
}

/// Prints a line of its own: above the spinners on a terminal, to stderr elsewhere.
pub fn say(line: &str) {
    if std::io::stderr().is_terminal() {
        spinners().suspend(|| eprintln!("{line}"));
    } else {
        eprintln!("{line}");
    }
}

/// A long step, shown until it is finished.
pub struct Step {
    label: String,
    started: Instant,
    bar: Option<ProgressBar>,
    last_print: Mutex<Instant>,
}

impl Step {
    /// Starts showing `label` (e.g. "building CoreDNS v1.12.4").
    pub fn start(label: impl Into<String>) -> Step {
        let label = label.into();
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = spinners().add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {prefix}: {wide_msg}")
                    .expect("static template"),
            );
            bar.set_prefix(label.clone());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        if bar.is_none() {
            say(&format!("==> {label}"));
        }
        Step {
            label,
            started: Instant::now(),
            bar,
            last_print: Mutex::new(Instant::now()),
        }
    }

    /// Shows the latest thing the step is doing.
    pub fn message(&self, msg: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(msg.to_string()),
            None => {
                let mut last = self.last_print.lock().expect("progress lock");
                if last.elapsed() >= Duration::from_secs(30) {
                    *last = Instant::now();
                    say(&format!(
                        "    {} ({:.0?}): {msg}",
                        self.label,
                        self.started.elapsed()
                    ));
                }
            }
        }
    }

    /// Prints one line of the step's progress (e.g. a stage that began): above the spinner on
    /// a terminal, as a plain line elsewhere (CI).
    pub fn line(&self, line: &str) {
        say(&format!("    {line}"));
    }

    /// How long the step has run.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Ends the step, printing how long it took.
    pub fn finish(self) -> Duration {
        let took = self.started.elapsed();
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
            spinners().remove(bar);
        }
        say(&format!("==> {} done in {:.1}s", self.label, took.as_secs_f64()));
        took
    }
}

/// A build command that failed; its output is in the log.
#[derive(Debug, thiserror::Error)]
#[error("`{command}` failed with {status}; last lines of {log}:\n{tail}")]
pub struct LoggedCommandFailed {
    pub command: String,
    pub status: String,
    pub log: String,
    pub tail: String,
}

/// Why [`run_logged`] failed.
#[derive(Debug, thiserror::Error)]
pub enum RunLoggedError {
    #[error("writing the build log {log}")]
    Log {
        log: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not start `{command}`")]
    Start {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("waiting for `{command}`")]
    Wait {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Failed(#[from] LoggedCommandFailed),
}

/// Runs `cmd` with stdout and stderr appended to `log`, showing progress on `step`.
pub fn run_logged(cmd: &mut Command, log: &Path, step: &Step) -> Result<(), RunLoggedError> {
    let command = CommandLine(cmd).to_string();
    let log_err = |source| RunLoggedError::Log {
        log: log.to_path_buf(),
        source,
    };
    let mut file = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(log_err)?;
    writeln!(file, "$ {command}").map_err(log_err)?;
    let file = Arc::new(Mutex::new(file));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| RunLoggedError::Start {
            command: command.clone(),
            source,
        })?;
    let tail = Arc::new(Mutex::new(Vec::<String>::new()));
    std::thread::scope(|scope| {
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        for stream in [
            Box::new(stdout) as Box<dyn std::io::Read + Send>,
            Box::new(stderr),
        ] {
            let file = Arc::clone(&file);
            let tail = Arc::clone(&tail);
            scope.spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = writeln!(file.lock().expect("log lock"), "{line}");
                    step.message(&line);
                    let mut tail = tail.lock().expect("tail lock");
                    tail.push(line);
                    if tail.len() > 30 {
                        tail.remove(0);
                    }
                }
            });
        }
    });
    let status = child.wait().map_err(|source| RunLoggedError::Wait {
        command: command.clone(),
        source,
    })?;
    if status.success() {
        return Ok(());
    }
    Err(LoggedCommandFailed {
        command,
        status: status.to_string(),
        log: log.display().to_string(),
        tail: tail.lock().expect("tail lock").join("\n"),
    }
    .into())
}
