//! The QEMU guest agent protocol over the VM's `qga.sock`, with the `qapi` crate: a [`Session`]
//! resynchronises with `guest-sync-delimited`, then runs `guest-exec` (+ `guest-exec-status`) and
//! the `guest-file-*` commands. One session per operation: QEMU's socket takes one client.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qapi::qga;

/// How much of a file one `guest-file-read`/`-write` moves.
pub const CHUNK: usize = 1 << 20;

/// Environment of guest commands (guest-exec replaces the agent's own).
pub const GUEST_ENV: [&str; 4] = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/root",
    "LANG=C.UTF-8",
    "SYSTEMD_PAGER=",
];

/// A guest agent operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum QgaError {
    #[error("connecting to the guest agent at {socket}: {source}")]
    Connect {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("guest agent at {socket} did not answer guest-sync-delimited: {why}")]
    Sync { socket: PathBuf, why: String },
    #[error("guest agent `{command}` {detail}: {source}")]
    Command {
        command: &'static str,
        detail: String,
        #[source]
        source: qapi::ExecuteError,
    },
    #[error("guest command {argv:?} still running after {waited:.1?} (guest pid {pid})")]
    Timeout {
        argv: Vec<String>,
        pid: i64,
        waited: Duration,
    },
}

/// How many late `guest-exec-status` replies one command may see before its error stands.
const MAX_LATE_REPLIES: u32 = 5;

impl QgaError {
    /// A command's reply did not come within the read timeout (EAGAIN/`WouldBlock` or `TimedOut`
    /// from the socket): the agent may still answer later.
    pub fn is_late_reply(&self) -> bool {
        matches!(
            self,
            QgaError::Command { source: qapi::ExecuteError::Io(e), .. }
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
        )
    }

    /// Whether the agent answered that it could not open a file (it does not exist, or may
    /// not be read): an answer, unlike a connection or read failure.
    pub fn is_open_refused(&self) -> bool {
        matches!(
            self,
            QgaError::Command {
                command: "guest-file-open",
                source: qapi::ExecuteError::Qapi(_),
                ..
            }
        )
    }

    /// Whether the agent did not answer at all (not started yet, rebooting, gone).
    pub fn is_unreachable(&self) -> bool {
        match self {
            QgaError::Connect { .. } | QgaError::Sync { .. } => true,
            QgaError::Command { source, .. } => matches!(source, qapi::ExecuteError::Io(_)),
            QgaError::Timeout { .. } => false,
        }
    }
}

/// How a guest command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    Code(i64),
    Signal(i64),
}

impl std::fmt::Display for ExitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitKind::Code(code) => write!(f, "exit status {code}"),
            ExitKind::Signal(sig) => write!(f, "signal {sig}"),
        }
    }
}

/// A finished guest command's status and output (decoded from base64).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestOutput {
    pub status: ExitKind,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The agent cut stdout or stderr (it keeps at most 16 MiB of each).
    pub truncated: bool,
}

impl GuestOutput {
    pub fn success(&self) -> bool {
        self.status == ExitKind::Code(0)
    }
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

type Stream = qapi::Stream<BufReader<UnixStream>, UnixStream>;

/// One synchronised connection to the guest agent.
pub struct Session {
    qga: qapi::Qga<Stream>,
    socket: PathBuf,
    /// The read/write timeout of the connection.
    io_timeout: Duration,
}

fn sync_id() -> i64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    i64::from((nanos ^ std::process::id().rotate_left(16)) & 0x7fff_ffff)
}

impl Session {
    /// Connects and synchronises; every read and write is bounded by `io_timeout`.
    pub fn connect(socket: &Path, io_timeout: Duration) -> Result<Session, QgaError> {
        let connect_err = |source| QgaError::Connect {
            socket: socket.to_path_buf(),
            source,
        };
        let stream = UnixStream::connect(socket).map_err(connect_err)?;
        stream.set_read_timeout(Some(io_timeout)).map_err(connect_err)?;
        stream.set_write_timeout(Some(io_timeout)).map_err(connect_err)?;
        let reader = BufReader::new(stream.try_clone().map_err(connect_err)?);
        let mut session = Session {
            qga: qapi::Qga::new(qapi::Stream::new(reader, stream)),
            socket: socket.to_path_buf(),
            io_timeout,
        };
        session.sync().map_err(|why| QgaError::Sync {
            socket: socket.to_path_buf(),
            why,
        })?;
        Ok(session)
    }

    /// `guest-sync-delimited`: a 0xFF resets the agent's parser; its answer starts with 0xFF,
    /// and anything before it (answers to a previous client, or late answers to this one) is
    /// skipped and returned, each line that is JSON as a value.
    fn sync(&mut self) -> Result<Vec<serde_json::Value>, String> {
        let id = sync_id();
        let stream = self.qga.inner_mut();
        let request = format!(r#"{{"execute":"guest-sync-delimited","arguments":{{"id":{id}}}}}"#);
        stream
            .write_all(&[0xff])
            .and_then(|_| stream.write_all(request.as_bytes()))
            .and_then(|_| stream.write_all(b"\n"))
            .and_then(|_| stream.flush())
            .map_err(|e| format!("writing: {e}"))?;
        let mut replies = Vec::new();
        loop {
            let mut skipped = Vec::new();
            stream
                .read_until(0xff, &mut skipped)
                .map_err(|e| format!("reading: {e}"))?;
            if skipped.last() != Some(&0xff) {
                return Err("the connection closed".into());
            }
            replies.extend(
                skipped
                    .split(|&b| b == b'\n' || b == 0xff)
                    .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok()),
            );
            let mut line = Vec::new();
            stream
                .read_until(b'\n', &mut line)
                .map_err(|e| format!("reading: {e}"))?;
            let reply: serde_json::Value = match serde_json::from_slice(&line) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if reply["return"].as_i64() == Some(id) {
                return Ok(replies);
            }
            replies.push(reply);
        }
    }

    fn execute<C: qapi::Command>(
        &mut self,
        command: &C,
        detail: impl Fn() -> String,
    ) -> Result<C::Ok, QgaError> {
        self.qga.execute(command).map_err(|source| QgaError::Command {
            command: C::NAME,
            detail: detail(),
            source,
        })
    }

    /// Bounds every later read and write by `timeout` (the sync used a short one).
    pub fn set_io_timeout(&mut self, timeout: Duration) -> std::io::Result<()> {
        let stream = self.qga.inner_mut().get_mut_write();
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        self.io_timeout = timeout;
        Ok(())
    }

    /// `guest-sync-delimited` again after a late reply, waiting up to `patience` for the agent
    /// (it is late already), then the usual timeout again. Returns the replies that came before
    /// the sync's (the late ones).
    fn resync(&mut self, patience: Duration) -> Result<Vec<serde_json::Value>, QgaError> {
        let usual = self.io_timeout;
        let socket = self.socket.clone();
        let sync_error = |why: String| QgaError::Sync {
            socket: socket.clone(),
            why,
        };
        self.set_io_timeout(patience)
            .map_err(|e| sync_error(e.to_string()))?;
        let synced = self.sync();
        self.set_io_timeout(usual)
            .map_err(|e| sync_error(e.to_string()))?;
        synced.map_err(sync_error)
    }

    /// `guest-ping`.
    pub fn ping(&mut self) -> Result<(), QgaError> {
        self.execute(&qga::guest_ping {}, String::new).map(drop)
    }

    /// `guest-set-time` to `nanos` since the epoch: the agent sets the clock itself, then runs
    /// `hwclock -w`, whose failure (no `hwclock` in the image) is an error after the clock
    /// was set; check with [`Session::get_time`].
    pub fn set_time(&mut self, nanos: i64) -> Result<(), QgaError> {
        self.execute(&qga::guest_set_time { time: Some(nanos) }, || {
            format!("to {nanos} ns")
        })
        .map(drop)
    }

    /// `guest-get-time`: the guest's clock in nanoseconds since the epoch.
    pub fn get_time(&mut self) -> Result<i64, QgaError> {
        self.execute(&qga::guest_get_time {}, String::new)
    }

    /// Starts `argv` in the guest without waiting; returns its guest pid.
    pub fn spawn(&mut self, argv: &[String], stdin: Option<Vec<u8>>, capture: bool) -> Result<i64, QgaError> {
        let (path, args) = argv.split_first().expect("argv has a program");
        let command = qga::guest_exec {
            path: path.clone(),
            arg: Some(args.to_vec()),
            env: Some(GUEST_ENV.iter().map(|s| s.to_string()).collect()),
            input_data: stdin,
            capture_output: Some(qga::GuestExecCaptureOutput::flag(capture)),
        };
        Ok(self.execute(&command, || format!("{argv:?}"))?.pid)
    }

    /// Runs `argv` to completion (polling `guest-exec-status`), at most `timeout`.
    pub fn exec(
        &mut self,
        argv: &[String],
        stdin: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<GuestOutput, QgaError> {
        let started = Instant::now();
        let pid = self.spawn(argv, stdin, true)?;
        let mut pause = Duration::from_millis(5);
        let mut late_replies = 0;
        loop {
            match self.exec_status(pid) {
                Ok(Some(out)) => return Ok(out),
                Ok(None) => {}
                // A loaded host can make the agent answer after our read timeout (EAGAIN):
                // resynchronise, reading the late reply on the way. If it said the command
                // exited, it is the only word of it: the agent forgets a pid once it reported
                // its exit, so asking again would fail. Otherwise the command still runs; ask
                // again rather than fail or run it twice.
                Err(err) if err.is_late_reply() && late_replies < MAX_LATE_REPLIES => {
                    late_replies += 1;
                    let patience = timeout.saturating_sub(started.elapsed()).max(self.io_timeout);
                    let late = self.resync(patience)?;
                    if let Some(out) = late.iter().find_map(exited_status_in) {
                        return Ok(out);
                    }
                    continue;
                }
                Err(err) => return Err(err),
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(QgaError::Timeout {
                    argv: argv.to_vec(),
                    pid,
                    waited,
                });
            }
            std::thread::sleep(pause.min(timeout - waited));
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// `guest-exec-status`: the output once guest pid `pid` exited, else `None`.
    pub fn exec_status(&mut self, pid: i64) -> Result<Option<GuestOutput>, QgaError> {
        let status = self.execute(&qga::guest_exec_status { pid }, || format!("pid {pid}"))?;
        Ok(output_once_exited(status))
    }

    /// Writes `data` to the guest file `path` (created or truncated).
    pub fn write_file(&mut self, path: &str, data: &[u8]) -> Result<(), QgaError> {
        let handle = self.open(path, "w")?;
        let result = (|| {
            let mut done = 0;
            for chunk in data.chunks(CHUNK) {
                let mut rest = chunk;
                while !rest.is_empty() {
                    let wrote = self.execute(
                        &qga::guest_file_write {
                            handle,
                            buf_b64: rest.to_vec(),
                            count: None,
                        },
                        || format!("{path} at offset {done}"),
                    )?;
                    let n = usize::try_from(wrote.count).unwrap_or(0).min(rest.len());
                    if n == 0 {
                        return Err(QgaError::Command {
                            command: "guest-file-write",
                            detail: format!("{path} at offset {done}"),
                            source: std::io::Error::new(std::io::ErrorKind::WriteZero, "wrote nothing")
                                .into(),
                        });
                    }
                    rest = &rest[n..];
                    done += n;
                }
            }
            Ok(())
        })();
        self.finish(handle, path, result)
    }

    /// Reads the whole guest file `path`.
    pub fn read_file(&mut self, path: &str) -> Result<Vec<u8>, QgaError> {
        self.read_file_from(path, 0)
    }

    /// Reads the guest file `path` from byte `offset` to its end: the new part of a growing
    /// file, read by the agent itself (no process started in the guest, unlike `tail`).
    pub fn read_file_from(&mut self, path: &str, offset: u64) -> Result<Vec<u8>, QgaError> {
        let handle = self.open(path, "r")?;
        let result = self
            .seek(handle, path, offset)
            .and_then(|()| self.read_to_end(handle, path, offset));
        self.finish(handle, path, result)
    }

    fn seek(&mut self, handle: i64, path: &str, offset: u64) -> Result<(), QgaError> {
        if offset == 0 {
            return Ok(());
        }
        let command = qga::guest_file_seek {
            handle,
            offset: i64::try_from(offset).unwrap_or(i64::MAX),
            whence: qga::GuestFileWhence::name(qga::QGASeek::set),
        };
        self.execute(&command, || format!("{path} to offset {offset}"))
            .map(drop)
    }

    fn read_to_end(&mut self, handle: i64, path: &str, offset: u64) -> Result<Vec<u8>, QgaError> {
        let mut data = Vec::new();
        loop {
            let read = self.execute(
                &qga::guest_file_read {
                    handle,
                    count: Some(CHUNK as i64),
                },
                || format!("{path} at offset {}", offset + data.len() as u64),
            )?;
            data.extend_from_slice(&read.buf_b64);
            if read.eof || read.count == 0 {
                return Ok(data);
            }
        }
    }

    fn open(&mut self, path: &str, mode: &str) -> Result<i64, QgaError> {
        let command = qga::guest_file_open {
            path: path.to_string(),
            mode: Some(mode.to_string()),
        };
        self.execute(&command, || format!("{path} (mode {mode})"))
    }

    fn finish<T>(&mut self, handle: i64, path: &str, result: Result<T, QgaError>) -> Result<T, QgaError> {
        let closed = self.execute(&qga::guest_file_close { handle }, || path.to_string());
        let value = result?;
        closed?;
        Ok(value)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

/// A `guest-exec-status` answer as the command's output, once it exited.
fn output_once_exited(status: qga::GuestExecStatus) -> Option<GuestOutput> {
    if !status.exited {
        return None;
    }
    let kind = match (status.exitcode, status.signal) {
        (_, Some(sig)) => ExitKind::Signal(sig),
        (Some(code), None) => ExitKind::Code(code),
        (None, None) => ExitKind::Code(-1),
    };
    Some(GuestOutput {
        status: kind,
        stdout: status.out_data.unwrap_or_default(),
        stderr: status.err_data.unwrap_or_default(),
        truncated: status.out_truncated == Some(true) || status.err_truncated == Some(true),
    })
}

/// The output in a late reply that is a `guest-exec-status` answer saying the command exited.
fn exited_status_in(reply: &serde_json::Value) -> Option<GuestOutput> {
    let status = serde_json::from_value::<qga::GuestExecStatus>(reply.get("return")?.clone()).ok()?;
    output_once_exited(status)
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    /// A stand-in guest agent (the real one is exercised by the VM tests) that first sends a
    /// stale answer, then answers guest-sync-delimited and one guest-exec/-status pair.
    fn fake_agent(listener: UnixListener) {
        fake_agent_late(listener, 0, Duration::ZERO);
    }

    /// [`fake_agent`] whose first `late` guest-exec-status replies come `delay` late (a stand-in:
    /// a loaded host makes the real agent late only by chance).
    fn fake_agent_late(listener: UnixListener, late: usize, delay: Duration) {
        fake_agent_script(listener, late, delay, false);
    }

    /// [`fake_agent`] whose first guest-exec-status reply comes `delay` late and says the command
    /// exited; like the real agent, it then forgets the pid.
    fn fake_agent_late_exit(listener: UnixListener, delay: Duration) {
        fake_agent_script(listener, 0, delay, true);
    }

    fn fake_agent_script(listener: UnixListener, late: usize, delay: Duration, exit_late: bool) {
        let mut late_left = late;
        let mut exit_reported = false;
        std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut out = conn.try_clone().unwrap();
            out.write_all(b"{\"return\": 12345}\n").unwrap();
            let mut reader = BufReader::new(conn);
            loop {
                let mut line = Vec::new();
                if reader.read_until(b'\n', &mut line).unwrap() == 0 {
                    return;
                }
                let text = String::from_utf8_lossy(&line)
                    .trim_start_matches('\u{fffd}')
                    .to_string();
                let json: serde_json::Value =
                    serde_json::from_str(text.trim_start_matches(|c: char| c != '{')).unwrap();
                let reply = match json["execute"].as_str().unwrap() {
                    "guest-sync-delimited" => {
                        out.write_all(&[0xff]).unwrap();
                        serde_json::json!({"return": json["arguments"]["id"]})
                    }
                    "guest-exec" => serde_json::json!({"return": {"pid": 42}}),
                    "guest-exec-status" if late_left > 0 => {
                        late_left -= 1;
                        std::thread::sleep(delay);
                        serde_json::json!({"return": {"exited": false}})
                    }
                    "guest-exec-status" if exit_reported => serde_json::json!({"error": {
                        "class": "GenericError", "desc": "Invalid parameter 'pid'"}}),
                    "guest-exec-status" => {
                        if exit_late {
                            std::thread::sleep(delay);
                            exit_reported = true;
                        }
                        serde_json::json!({"return": {
                            "exited": true, "exitcode": 3,
                            "out-data": "aGVsbG8K", "err-data": "b29wcwo="}})
                    }
                    _ => serde_json::json!({"error": {"class": "GenericError", "desc": "unsupported"}}),
                };
                writeln!(out, "{reply}").unwrap();
            }
        });
    }

    #[test]
    fn sync_skips_stale_answers_and_exec_decodes_output() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("qga.sock");
        fake_agent(UnixListener::bind(&socket).unwrap());
        let mut session = Session::connect(&socket, Duration::from_secs(5)).unwrap();
        let out = session
            .exec(
                &["/bin/sh".into(), "-c".into(), "x".into()],
                None,
                Duration::from_secs(5),
            )
            .unwrap();
        assert_eq!(out.status, ExitKind::Code(3));
        assert_eq!(out.stdout_text(), "hello\n");
        assert_eq!(out.stderr_text(), "oops\n");
        assert!(!out.success());
        let err = session.read_file("/etc/x").unwrap_err();
        assert!(
            err.to_string().contains("guest-file-open") && err.to_string().contains("/etc/x"),
            "{err}"
        );
        assert!(err.is_open_refused() && !err.is_unreachable(), "{err:?}");
    }

    #[test]
    fn a_late_exec_status_reply_is_skipped_and_the_status_asked_again() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("qga.sock");
        fake_agent_late(
            UnixListener::bind(&socket).unwrap(),
            2,
            Duration::from_millis(400),
        );
        let mut session = Session::connect(&socket, Duration::from_millis(200)).unwrap();
        let out = session
            .exec(&["/bin/true".into()], None, Duration::from_secs(10))
            .unwrap();
        assert_eq!(
            (out.status, out.stdout_text()),
            (ExitKind::Code(3), "hello\n".into())
        );
    }

    #[test]
    fn a_late_reply_saying_the_command_exited_is_its_output() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("qga.sock");
        fake_agent_late_exit(UnixListener::bind(&socket).unwrap(), Duration::from_millis(400));
        let mut session = Session::connect(&socket, Duration::from_millis(200)).unwrap();
        let out = session
            .exec(&["/bin/true".into()], None, Duration::from_secs(10))
            .unwrap();
        assert_eq!(
            (out.status, out.stdout_text(), out.stderr_text()),
            (ExitKind::Code(3), "hello\n".into(), "oops\n".into())
        );
    }

    #[test]
    fn an_agent_late_every_time_is_an_error_after_a_few_tries() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("qga.sock");
        fake_agent_late(
            UnixListener::bind(&socket).unwrap(),
            100,
            Duration::from_millis(300),
        );
        let mut session = Session::connect(&socket, Duration::from_millis(100)).unwrap();
        let err = session
            .exec(&["/bin/true".into()], None, Duration::from_secs(30))
            .unwrap_err();
        assert!(err.is_late_reply(), "{err}");
    }

    #[test]
    fn silent_agent_fails_sync_within_the_timeout() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("qga.sock");
        let _listener = UnixListener::bind(&socket).unwrap();
        let started = Instant::now();
        let err = Session::connect(&socket, Duration::from_millis(200))
            .err()
            .unwrap();
        assert!(err.is_unreachable(), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
