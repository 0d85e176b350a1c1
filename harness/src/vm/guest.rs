//! [`GuestAgent`]: guest commands and file copies over a VM's `qga.sock`, for an owned
//! [`super::Vm`] and for other processes (`harness vm exec|cp`) alike.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::bulk::{self, BulkError};
use super::deadline::{Attempt, Deadlines, wait_until};
use super::error::VmError;
use super::qga::{GuestOutput, QgaError, Session};
use super::rundir::RunDir;

/// How long one sync attempt may take before the connection is retried.
const SYNC_ATTEMPT: Duration = Duration::from_secs(5);

/// The guest agent of one VM.
#[derive(Clone, Debug)]
pub struct GuestAgent {
    vm: String,
    socket: PathBuf,
    /// The raw data port's socket for fast copies ([`super::bulk`]), if the VM has one.
    data_socket: Option<PathBuf>,
    deadlines: Deadlines,
}

/// A guest command line: a shell command (`/bin/sh -c`) or an argv.
pub fn shell(command: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), command.into()]
}

impl GuestAgent {
    pub fn new(vm: &str, socket: PathBuf, deadlines: Deadlines) -> GuestAgent {
        GuestAgent {
            vm: vm.to_string(),
            socket,
            data_socket: None,
            deadlines,
        }
    }

    /// The agent of the VM whose run directory is `run`, with its data port for fast copies.
    pub fn for_run_dir(vm: &str, run: &RunDir, deadlines: Deadlines) -> GuestAgent {
        GuestAgent {
            data_socket: Some(run.data()),
            ..GuestAgent::new(vm, run.qga(), deadlines)
        }
    }

    /// The time a copy of `len` bytes may take: the command deadline plus 1 s per MiB.
    fn copy_timeout(&self, len: u64) -> Duration {
        self.deadlines.command + Duration::from_secs(len >> 20)
    }

    pub fn vm(&self) -> &str {
        &self.vm
    }

    pub fn deadlines(&self) -> &Deadlines {
        &self.deadlines
    }

    fn agent_err(&self, source: QgaError) -> VmError {
        VmError::Agent {
            vm: self.vm.clone(),
            source: Box::new(source),
        }
    }

    /// A synchronised session, retried until the agent answers (at most `deadlines.agent`);
    /// `abort` is checked between attempts (e.g. "QEMU exited").
    pub fn session(&self, abort: &dyn Fn() -> Option<VmError>) -> Result<Session, VmError> {
        self.session_within(self.deadlines.agent, abort)
    }

    /// [`GuestAgent::session`] with an explicit deadline.
    pub fn session_within(
        &self,
        timeout: Duration,
        abort: &dyn Fn() -> Option<VmError>,
    ) -> Result<Session, VmError> {
        wait_until(&self.vm, timeout, "the guest agent to answer guest-sync", || {
            if let Some(err) = abort() {
                return Attempt::Abort(err);
            }
            match Session::connect(&self.socket, SYNC_ATTEMPT.min(timeout)) {
                Ok(mut session) => match session.set_io_timeout(self.deadlines.command) {
                    Ok(()) => Attempt::Ready(session),
                    Err(e) => Attempt::Retry(e.to_string()),
                },
                Err(err) if err.is_unreachable() => Attempt::Retry(err.to_string()),
                Err(err) => Attempt::Abort(self.agent_err(err)),
            }
        })
    }

    /// Runs `argv` and returns its output whatever its status (the caller checks).
    pub fn exec(
        &self,
        argv: &[String],
        stdin: Option<Vec<u8>>,
        timeout: Duration,
        abort: &dyn Fn() -> Option<VmError>,
    ) -> Result<GuestOutput, VmError> {
        let mut session = self.session(abort)?;
        session.exec(argv, stdin, timeout).map_err(|e| self.agent_err(e))
    }

    /// Starts `argv` without waiting for it (for `systemctl reboot` and the like).
    pub fn spawn_detached(
        &self,
        argv: &[String],
        abort: &dyn Fn() -> Option<VmError>,
    ) -> Result<i64, VmError> {
        let mut session = self.session(abort)?;
        session.spawn(argv, None, false).map_err(|e| self.agent_err(e))
    }

    /// Writes `data` to `guest_path` with permission bits `mode`, atomically (a temporary file
    /// renamed into place, so a running binary can be replaced).
    pub fn write_file(
        &self,
        guest_path: &str,
        data: &[u8],
        mode: u32,
        abort: &dyn Fn() -> Option<VmError>,
    ) -> Result<(), VmError> {
        let tmp = format!("{guest_path}.lab-copy-tmp");
        let mut session = self.session(abort)?;
        let mut done = false;
        if let Some(socket) = &self.data_socket {
            let timeout = self.copy_timeout(data.len() as u64);
            match bulk::write(&mut session, socket, &tmp, data, self.deadlines.agent, timeout) {
                Ok(()) => done = true,
                Err(BulkError::Unavailable(why)) => {
                    tracing::debug!(vm = %self.vm, %why, "data port unavailable, copying through the agent");
                    session = self.session(abort)?;
                }
                Err(BulkError::Agent(e)) => return Err(self.agent_err(e)),
                Err(e) => return Err(self.io_err(format!("copying to {guest_path}"), e)),
            }
        }
        if !done {
            session.write_file(&tmp, data).map_err(|e| self.agent_err(e))?;
        }
        let argv = vec![
            "/bin/sh".to_string(),
            "-c".into(),
            r#"chmod "$1" "$2" && mv -f "$2" "$3""#.into(),
            "sh".into(),
            format!("{mode:o}"),
            tmp,
            guest_path.to_string(),
        ];
        let out = session
            .exec(&argv, None, self.deadlines.command)
            .map_err(|e| self.agent_err(e))?;
        check(&self.vm, &argv, out).map(drop)
    }

    /// Reads the guest file `guest_path`.
    pub fn read_file(
        &self,
        guest_path: &str,
        abort: &dyn Fn() -> Option<VmError>,
    ) -> Result<Vec<u8>, VmError> {
        let mut session = self.session(abort)?;
        if let Some(socket) = &self.data_socket {
            let argv = vec![
                "stat".to_string(),
                "-L".into(),
                "-c".into(),
                "%s".into(),
                guest_path.to_string(),
            ];
            let out = session
                .exec(&argv, None, self.deadlines.command)
                .map_err(|e| self.agent_err(e))?;
            let size: u64 = check(&self.vm, &argv, out)?
                .stdout_text()
                .trim()
                .parse()
                .map_err(|_| self.io_err(format!("reading {guest_path}"), "stat gave no size".to_string()))?;
            match bulk::read(
                &mut session,
                socket,
                guest_path,
                size,
                self.deadlines.agent,
                self.copy_timeout(size),
            ) {
                Ok(data) => return Ok(data),
                Err(BulkError::Unavailable(why)) => {
                    tracing::debug!(vm = %self.vm, %why, "data port unavailable, copying through the agent");
                    session = self.session(abort)?;
                }
                Err(BulkError::Agent(e)) => return Err(self.agent_err(e)),
                Err(e) => return Err(self.io_err(format!("copying from {guest_path}"), e)),
            }
        }
        session.read_file(guest_path).map_err(|e| self.agent_err(e))
    }

    fn io_err(&self, what: String, why: impl std::fmt::Display) -> VmError {
        VmError::Io {
            vm: self.vm.clone(),
            what,
            source: std::io::Error::other(why.to_string()),
        }
    }

    /// Copies the host file `host` to `guest` (keeping its permission bits).
    pub fn copy_in(
        &self,
        host: &Path,
        guest: &str,
        abort: &dyn Fn() -> Option<VmError>,
    ) -> Result<(), VmError> {
        use std::os::unix::fs::PermissionsExt;
        let io = |source| VmError::Io {
            vm: self.vm.clone(),
            what: format!("reading {}", host.display()),
            source,
        };
        let data = std::fs::read(host).map_err(io)?;
        let mode = std::fs::metadata(host).map_err(io)?.permissions().mode() & 0o7777;
        self.write_file(guest, &data, mode, abort)
    }

    /// Copies the guest file `guest` to `host`.
    pub fn copy_out(
        &self,
        guest: &str,
        host: &Path,
        abort: &dyn Fn() -> Option<VmError>,
    ) -> Result<(), VmError> {
        let data = self.read_file(guest, abort)?;
        std::fs::write(host, data).map_err(|source| VmError::Io {
            vm: self.vm.clone(),
            what: format!("writing {}", host.display()),
            source,
        })
    }
}

/// `Ok(output)` when the command exited 0, else [`VmError::CommandFailed`] with its output.
pub fn check(vm: &str, argv: &[String], out: GuestOutput) -> Result<GuestOutput, VmError> {
    let command = || match argv {
        [sh, c, cmd] if sh == "/bin/sh" && c == "-c" => cmd.clone(),
        _ => argv.join(" "),
    };
    if out.truncated {
        return Err(VmError::OutputTruncated {
            vm: vm.to_string(),
            command: command(),
        });
    }
    if out.success() {
        return Ok(out);
    }
    let command = command();
    Err(VmError::CommandFailed {
        vm: vm.to_string(),
        command,
        status: out.status,
        stdout: out.stdout_text(),
        stderr: out.stderr_text(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::qga::ExitKind;

    #[test]
    fn truncated_output_fails_even_with_exit_status_zero() {
        let out = GuestOutput {
            status: ExitKind::Code(0),
            stdout: b"the first part\n".to_vec(),
            stderr: Vec::new(),
            truncated: true,
        };
        let err = check("node1", &shell("find /"), out).unwrap_err().to_string();
        assert!(
            err.contains("node1") && err.contains("find /") && err.contains("cut"),
            "{err}"
        );
    }

    #[test]
    fn non_zero_exit_fails_with_status_stdout_and_stderr() {
        let out = GuestOutput {
            status: ExitKind::Code(2),
            stdout: b"partial\n".to_vec(),
            stderr: b"no such unit\n".to_vec(),
            truncated: false,
        };
        let err = check("node1", &shell("systemctl status x"), out)
            .unwrap_err()
            .to_string();
        for part in [
            "node1",
            "`systemctl status x`",
            "exit status 2",
            "partial",
            "no such unit",
        ] {
            assert!(err.contains(part), "{part:?} missing in {err}");
        }
    }
}
