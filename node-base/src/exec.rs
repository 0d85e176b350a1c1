//! The one way the agent (and the harness) runs an external command.
//!
//! [`run`] returns the command's output when it exits 0; otherwise a
//! [`CommandFailed`] carrying the command line, exit status, stdout and stderr.

use std::fmt;
use std::process::{Command, ExitStatus, Output, Stdio};

/// An external command that could not be run or did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum CommandFailed {
    /// The program could not be started at all (missing binary, permissions).
    #[error("could not start `{command}`: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The program ran and exited unsuccessfully.
    #[error("`{command}` failed with {status}\n--- stdout ---\n{stdout}--- stderr ---\n{stderr}")]
    Status {
        command: String,
        status: ExitStatus,
        stdout: String,
        stderr: String,
    },
}

impl CommandFailed {
    /// The command line, as shown in messages.
    pub fn command(&self) -> &str {
        match self {
            CommandFailed::Spawn { command, .. } | CommandFailed::Status { command, .. } => command,
        }
    }

    /// Stderr of a command that ran, empty for one that never started.
    pub fn stderr(&self) -> &str {
        match self {
            CommandFailed::Spawn { .. } => "",
            CommandFailed::Status { stderr, .. } => stderr,
        }
    }
}

/// Renders a command line the way a person would type it.
pub struct CommandLine<'a>(pub &'a Command);

impl fmt::Display for CommandLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.get_program().to_string_lossy())?;
        for arg in self.0.get_args() {
            let arg = arg.to_string_lossy();
            if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                write!(f, " '{}'", arg.replace('\'', r"'\''"))?;
            } else {
                write!(f, " {arg}")?;
            }
        }
        Ok(())
    }
}

/// Runs `cmd` to completion, capturing stdout and stderr (stdin is null unless
/// the caller set it). Fails unless the command exits 0.
pub fn run(cmd: &mut Command) -> Result<Output, CommandFailed> {
    let output = run_unchecked(cmd)?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(CommandFailed::Status {
            command: CommandLine(cmd).to_string(),
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

/// Runs `cmd` to completion and returns its output whatever the exit status;
/// fails only when the program cannot be started.
pub fn run_unchecked(cmd: &mut Command) -> Result<Output, CommandFailed> {
    tracing::debug!(command = %CommandLine(cmd), "running");
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.output().map_err(|source| CommandFailed::Spawn {
        command: CommandLine(cmd).to_string(),
        source,
    })
}

/// Runs `cmd` and returns its stdout as text.
pub fn run_stdout(cmd: &mut Command) -> Result<String, CommandFailed> {
    Ok(String::from_utf8_lossy(&run(cmd)?.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_carries_command_status_stdout_and_stderr() {
        let err = run(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"])).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("sh -c 'echo out; echo err >&2; exit 3'"), "{text}");
        assert!(text.contains("exit status: 3"), "{text}");
        assert!(text.contains("out\n"), "{text}");
        assert_eq!(err.stderr(), "err\n");
    }

    #[test]
    fn missing_program_is_a_spawn_error_naming_it() {
        let err = run(&mut Command::new("/nonexistent/tool")).unwrap_err();
        assert!(matches!(err, CommandFailed::Spawn { .. }));
        assert!(err.to_string().contains("/nonexistent/tool"));
    }

    #[test]
    fn success_returns_stdout() {
        assert_eq!(run_stdout(Command::new("echo").arg("hi")).unwrap(), "hi\n");
    }
}
