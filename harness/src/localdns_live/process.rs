//! [`Proc`]: a process of a live LocalDNS with its output in a log file, killed on drop.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::error::{LiveError, io_err};

/// A process killed on drop.
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    /// Starts `cmd` with stdin null and stdout and stderr into `log`.
    pub fn spawn_logged(mut cmd: Command, log: PathBuf) -> Result<Proc, LiveError> {
        let out = File::create(&log).map_err(io_err("creating", &log))?;
        let err = out.try_clone().map_err(io_err("duplicating", &log))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| LiveError::Spawn {
                command: agent::exec::CommandLine(&cmd).to_string(),
                source,
            })?;
        Ok(Proc { child, log })
    }

    /// The process's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit, at most `timeout`: its status, or `None` if it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<Option<ExitStatus>, LiveError> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let status = self.child.try_wait().map_err(|source| LiveError::Wait {
                pid: self.child.id(),
                source,
            })?;
            if status.is_some() {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(None)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}
