//! The host-wide lock: one agent process acts on a host at a time. A second one gets
//! [`LockError::Held`] naming the holder and changes nothing. The lock is an exclusive `flock` on
//! `/run/unbounded-agent.lock` (released by the kernel when the holder exits, even by SIGKILL).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::files::under;

/// Where the lock lives on the host.
pub const PATH: &str = crate::paths::LOCK;

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another unbounded-agent is acting on this host ({holder}; lock {path}); \
         nothing was changed — wait for it to finish and run again"
    )]
    Held { path: PathBuf, holder: String },
    #[error("cannot take the host lock {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct HostLock {
    _file: File,
}

/// Takes the lock below `root` (`/` on a real host) for `what` (e.g. `start`), or fails at once.
pub fn take(root: &Path, what: &str) -> Result<HostLock, LockError> {
    let path = under(root, Path::new(PATH));
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(LockError::Held {
                path: path.clone(),
                holder: if holder.is_empty() {
                    "holder unknown".into()
                } else {
                    holder.to_owned()
                },
            });
        }
        Err(TryLockError::Error(e)) => return Err(io(e)),
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    write!(file, "pid {} running `{what}`", std::process::id()).map_err(io)?;
    Ok(HostLock { _file: file })
}

/// [`take`], waiting up to `within` while another process holds the lock (for short holders
/// such as the daemon's host network check; the last refusal names the holder).
pub fn take_within(root: &Path, what: &str, within: std::time::Duration) -> Result<HostLock, LockError> {
    let deadline = std::time::Instant::now() + within;
    loop {
        match take(root, what) {
            Err(LockError::Held { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            taken => return taken,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taker_that_may_wait_gets_the_lock_once_it_is_let_go_and_not_before() {
        let root = tempfile::tempdir().unwrap();
        let first = take(root.path(), "the daemon's host network check").unwrap();
        let short = take_within(root.path(), "refresh", std::time::Duration::from_millis(300));
        assert!(matches!(short, Err(LockError::Held { .. })), "{short:?}");
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(400));
            drop(first);
        });
        let started = std::time::Instant::now();
        take_within(root.path(), "refresh", std::time::Duration::from_secs(10)).unwrap();
        assert!(
            started.elapsed() >= std::time::Duration::from_millis(300),
            "{:?}",
            started.elapsed()
        );
        releaser.join().unwrap();
    }

    #[test]
    fn a_second_taker_is_refused_naming_the_holder_until_the_first_lets_go() {
        let root = tempfile::tempdir().unwrap();
        let first = take(root.path(), "start").unwrap();
        let err = take(root.path(), "reset").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("pid {} running `start`", std::process::id())),
            "{text}"
        );
        assert!(text.contains("nothing was changed"), "{text}");
        drop(first);
        take(root.path(), "reset").unwrap();
    }
}
