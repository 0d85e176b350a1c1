//! [`NotifySocket`]: the `NOTIFY_SOCKET` a live LocalDNS's supervisor reports to, as systemd's.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::{LiveError, io_err};

/// A notify socket the caller owns, like systemd's.
pub struct NotifySocket {
    pub socket: UnixDatagram,
    pub path: PathBuf,
}

impl NotifySocket {
    /// Binds `notify.sock` in `dir`.
    pub fn bind(dir: &Path) -> Result<NotifySocket, LiveError> {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).map_err(io_err("binding", &path))?;
        Ok(NotifySocket { socket, path })
    }

    /// The next message within `timeout`, if any.
    pub fn recv(&self, timeout: Duration) -> Option<String> {
        // A zero timeout would mean none at all (and is refused).
        let timeout = timeout.max(Duration::from_micros(1));
        self.socket.set_read_timeout(Some(timeout)).ok()?;
        let mut buf = [0u8; 4096];
        let n = self.socket.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Drops the messages queued now (those of an earlier supervisor, say).
    pub fn drain(&self) {
        while self.recv(Duration::from_millis(1)).is_some() {}
    }

    /// The messages queued now, without waiting for more: a supervisor pinging its watchdog
    /// keeps sending, so reading until a pause in its messages can take minutes under TCG.
    pub fn queued(&self) -> Result<Vec<String>, LiveError> {
        let nonblocking = |on| {
            self.socket
                .set_nonblocking(on)
                .map_err(io_err("setting the blocking mode of", &self.path))
        };
        nonblocking(true)?;
        let mut buf = [0u8; 4096];
        let mut messages = Vec::new();
        while let Ok(n) = self.socket.recv(&mut buf) {
            messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        nonblocking(false)?;
        Ok(messages)
    }

    /// Messages until one contains `needle` (returned with those before it), within `timeout`;
    /// else the messages seen.
    pub fn until(&self, needle: &str, timeout: Duration) -> Result<Vec<String>, Vec<String>> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.recv(left) {
                Some(msg) => {
                    let found = msg.contains(needle);
                    seen.push(msg);
                    if found {
                        return Ok(seen);
                    }
                }
                None => break,
            }
        }
        Err(seen)
    }
}
