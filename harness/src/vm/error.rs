//! [`VmError`]: everything booting, driving or stopping a VM can fail with.

use super::accel::BadAccel;
use super::deadline::WaitTimeout;
use super::overlay::OverlayError;
use super::qga::{ExitKind, QgaError};
use super::qmp::QmpError;
use super::rundir::RunDirError;
use super::state::StateError;

/// `Debug` shows the message and its causes (tests print errors with `unwrap`/`expect`).
#[derive(thiserror::Error)]
pub enum VmError {
    #[error("bad VM spec: {0}")]
    Spec(String),
    #[error(transparent)]
    Accel(#[from] BadAccel),
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    #[error("VM {vm}: creating its disk overlay: {source}")]
    Overlay {
        vm: String,
        #[source]
        source: OverlayError,
    },
    #[error("VM {vm}: could not start `{command}`: {source}")]
    Start {
        vm: String,
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// QEMU exited when it was not asked to.
    #[error(transparent)]
    Crashed(Box<Crash>),
    /// A wait ran out of time.
    #[error(transparent)]
    Timeout(Box<TimedOut>),
    /// A guest command exited non-zero (and was not allowed to).
    #[error("VM {vm}: `{command}` failed with {status}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}")]
    CommandFailed {
        vm: String,
        command: String,
        status: ExitKind,
        stdout: String,
        stderr: String,
    },
    /// A guest command's output went past what the guest agent keeps (16 MiB): a checked command
    /// never returns part of its output as if it were all of it.
    #[error(
        "VM {vm}: `{command}` printed more than the guest agent keeps; its output was cut (write it to a guest file and copy that out)"
    )]
    OutputTruncated { vm: String, command: String },
    #[error("VM {vm}: {source}")]
    Agent {
        vm: String,
        #[source]
        source: Box<QgaError>,
    },
    #[error("VM {vm}: {source}")]
    Qmp {
        vm: String,
        #[source]
        source: Box<QmpError>,
    },
    #[error("VM {vm}: {what}: {source}")]
    Io {
        vm: String,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("VM {vm}: saved state: {source}")]
    State {
        vm: String,
        #[source]
        source: Box<StateError>,
    },
    #[error("VM {vm}: processes of QEMU's process group {pgid} survived SIGKILL")]
    Survivors { vm: String, pgid: i32 },
}

/// QEMU exited unexpectedly: its status, what the harness was doing, and the evidence at hand.
#[derive(Debug, thiserror::Error)]
#[error(
    "VM {vm}: QEMU exited unexpectedly ({status}) while {doing}\n--- QEMU stderr ({dir}/qemu.stderr) ---\n{stderr}\n--- last console lines ({dir}/console.log) ---\n{console}"
)]
pub struct Crash {
    pub vm: String,
    pub status: String,
    pub doing: String,
    pub dir: String,
    pub stderr: String,
    pub console: String,
}

/// A [`WaitTimeout`] with the VM's last console lines.
#[derive(Debug, thiserror::Error)]
#[error("{source}\n--- last console lines ({dir}/console.log) ---\n{console}")]
pub struct TimedOut {
    #[source]
    pub source: WaitTimeout,
    pub dir: String,
    pub console: String,
}

impl From<WaitTimeout> for VmError {
    fn from(source: WaitTimeout) -> VmError {
        VmError::Timeout(Box::new(TimedOut {
            source,
            dir: String::new(),
            console: String::new(),
        }))
    }
}

impl std::fmt::Debug for VmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts = agent::error_chain::parts(self);
        write!(f, "{}", parts.join("\n  caused by: "))
    }
}
