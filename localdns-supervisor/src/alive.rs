//! The line between the supervisor and the spare (`localdns-spare.service`, [`super::spare`]): a
//! Unix socket the supervisor listens on in its runtime directory once CoreDNS is healthy. The
//! spare stays connected; the kernel closes the supervisor's end the moment the supervisor dies,
//! whatever kills it (SIGKILL, a crash, systemd's watchdog), so the spare learns of the death at
//! once, before systemd has even noticed. A supervisor that stops on purpose (SIGTERM: a stop or a
//! planned restart of the unit) first writes [`STOPPING`] to each connection, so that the spare
//! stands by instead of taking over.

use std::io;
use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

/// The socket's name in the supervisor's runtime directory (`/run/localdns/alive.sock`).
pub const SOCKET: &str = "alive.sock";
/// What the supervisor writes to the spare before it stops on purpose.
pub const STOPPING: &[u8] = b"stopping\n";

/// The socket of the supervisor whose runtime directory is `dir`.
pub fn socket_in(dir: &Path) -> PathBuf {
    dir.join(SOCKET)
}

/// The supervisor's end: the listening socket and the spares connected to it.
pub struct AliveLine {
    path: PathBuf,
    listener: UnixListener,
    spares: Vec<UnixStream>,
}

impl AliveLine {
    /// Listens on [`SOCKET`] in `dir` (a socket file left by a supervisor that died is replaced).
    pub fn open(dir: &Path) -> io::Result<AliveLine> {
        let path = socket_in(dir);
        match std::fs::remove_file(&path) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
            _ => {}
        }
        let listener = UnixListener::bind(&path)?;
        Ok(AliveLine {
            path,
            listener,
            spares: Vec::new(),
        })
    }

    /// Waits for the next spare to connect and keeps its connection (the supervisor never reads
    /// it: the connection exists to be closed by the supervisor's death).
    pub async fn accept(&mut self) {
        match self.listener.accept().await {
            Ok((stream, _)) => {
                tracing::info!("the spare (localdns-spare.service) is watching");
                self.spares.push(stream);
            }
            Err(err) => {
                tracing::warn!(%err, "cannot accept the spare's connection");
                // Do not spin on a listener that keeps failing.
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }

    /// Tells every spare that this supervisor stops on purpose, then closes the line.
    pub async fn stopping(mut self) {
        for spare in &mut self.spares {
            if let Err(err) = spare.write_all(STOPPING).await {
                tracing::warn!(%err, "cannot tell the spare that the supervisor stops");
            }
        }
    }
}

impl Drop for AliveLine {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Waits on `line`'s accept, or forever without a line.
pub async fn accept_some(line: &mut Option<AliveLine>) {
    match line {
        Some(line) => line.accept().await,
        None => std::future::pending().await,
    }
}
