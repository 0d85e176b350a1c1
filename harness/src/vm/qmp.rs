//! QMP over the VM's `qmp.sock` with the `qapi` crate: connect, negotiate, run one command.
//! Connections are per command (QEMU's socket takes one client at a time).

use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use qapi::qmp;

/// A QMP command that could not be run.
#[derive(Debug, thiserror::Error)]
#[error("QMP `{command}` on {socket}: {source}")]
pub struct QmpError {
    pub command: &'static str,
    pub socket: PathBuf,
    #[source]
    pub source: qapi::ExecuteError,
}

/// Connects to `socket`, negotiates capabilities and runs `command`, each read and write
/// bounded by `timeout`.
pub fn execute<C: qapi::Command>(socket: &Path, command: &C, timeout: Duration) -> Result<C::Ok, QmpError> {
    let err = |source: qapi::ExecuteError| QmpError {
        command: C::NAME,
        socket: socket.to_path_buf(),
        source,
    };
    let stream = UnixStream::connect(socket).map_err(|e| err(e.into()))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| err(e.into()))?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| err(e.into()))?;
    let reader = BufReader::new(stream.try_clone().map_err(|e| err(e.into()))?);
    let mut qmp = qapi::Qmp::new(qapi::Stream::new(reader, stream));
    qmp.handshake().map_err(err)?;
    qmp.execute(command).map_err(err)
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, Write};
    use std::os::unix::net::UnixListener;

    use super::*;

    /// A stand-in QMP server (the real one is exercised by the VM tests): greets, accepts
    /// capabilities, answers `query-status`, and reports an error for anything else.
    fn fake_qmp(listener: UnixListener) {
        std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut out = conn.try_clone().unwrap();
            writeln!(out, r#"{{"QMP": {{"version": {{"qemu": {{"micro": 0, "minor": 2, "major": 7}}, "package": ""}}, "capabilities": []}}}}"#).unwrap();
            for line in BufReader::new(conn).lines() {
                let line = line.unwrap();
                let reply = if line.contains("qmp_capabilities") {
                    r#"{"return": {}}"#.to_string()
                } else if line.contains("query-status") {
                    r#"{"event": "RESUME", "data": {}, "timestamp": {"seconds": 1, "microseconds": 2}}
{"return": {"status": "running", "singlestep": false, "running": true}}"#
                        .to_string()
                } else {
                    r#"{"error": {"class": "CommandNotFound", "desc": "nope"}}"#.to_string()
                };
                writeln!(out, "{reply}").unwrap();
            }
        });
    }

    #[test]
    fn executes_a_command_after_the_handshake_skipping_events() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("qmp.sock");
        fake_qmp(UnixListener::bind(&socket).unwrap());
        let status = execute(&socket, &qmp::query_status {}, Duration::from_secs(5)).unwrap();
        assert!(status.running);
    }

    #[test]
    fn errors_name_the_command_and_socket() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("qmp.sock");
        fake_qmp(UnixListener::bind(&socket).unwrap());
        let err = execute(&socket, &qmp::system_reset {}, Duration::from_secs(5)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("system_reset") && text.contains("qmp.sock") && text.contains("nope"),
            "{text}"
        );
        let err = execute(
            &tmp.path().join("none.sock"),
            &qmp::quit {},
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(err.to_string().contains("none.sock"), "{err}");
    }
}
