//! One control plane process: started inside the lab namespace (`setns` before `exec`) in
//! its own process group, with SIGKILL as its parent-death signal (it dies with the harness
//! even on SIGKILL), its stdout and stderr appended to `<log dir>/<name>.log`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::error::{ControlPlaneError, io_err};
use crate::child;
use crate::lab::netns;

/// A running component (`etcd`, `kube-apiserver`, ...).
pub struct Component {
    name: &'static str,
    pid: i32,
    log: PathBuf,
    child: Mutex<Child>,
}

impl Component {
    /// Starts `program args` inside namespace `netns`, logging to `<log_dir>/<name>.log`.
    pub fn start(
        name: &'static str,
        program: &Path,
        args: &[String],
        netns: &str,
        log_dir: &Path,
    ) -> Result<Component, ControlPlaneError> {
        let log = log_dir.join(format!("{name}.log"));
        let mut out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(io_err("opening the log", &log))?;
        // Logs are appended to (one evidence directory may see several runs): mark each start.
        writeln!(
            out,
            "=== {name} in {netns}, started by harness pid {}: {} {}",
            std::process::id(),
            program.display(),
            args.join(" ")
        )
        .map_err(io_err("writing the log", &log))?;
        let err = out.try_clone().map_err(io_err("opening the log", &log))?;
        let ns_path = netns::netns_path(netns);
        let ns_file = File::open(&ns_path).map_err(io_err("opening the network namespace", &ns_path))?;
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        tracing::debug!(component = name, ?args, "starting");
        let spawned = child::spawn(cmd, Some(&ns_file));
        drop(ns_file);
        let child = spawned.map_err(|source| ControlPlaneError::Spawn {
            component: name,
            program: program.to_path_buf(),
            source,
        })?;
        Ok(Component {
            name,
            pid: child.id() as i32,
            log,
            child: Mutex::new(child),
        })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Its exit status, once it exited (reaps it).
    pub fn exited(&self) -> Option<ExitStatus> {
        self.child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_wait()
            .ok()
            .flatten()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// Stops it: SIGTERM to its group, then SIGKILL after `grace`; waits for the exit.
    /// Returns a problem when it is still there.
    pub fn stop(&self, grace: Duration) -> Option<String> {
        if self.exited().is_none() {
            child::signal_group(self.pid, Signal::SIGTERM);
        }
        for (signal, wait) in [(None, grace), (Some(Signal::SIGKILL), Duration::from_secs(10))] {
            if let Some(signal) = signal {
                tracing::info!(
                    component = self.name,
                    ?grace,
                    "still running after SIGTERM; killing it"
                );
                child::signal_group(self.pid, signal);
            }
            let until = Instant::now() + wait;
            while Instant::now() < until {
                if self.exited().is_some() {
                    // The group's other members (none expected) go too.
                    child::signal_group(self.pid, Signal::SIGKILL);
                    return None;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Some(format!("{} (pid {}) survived SIGKILL", self.name, self.pid))
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        if self.exited().is_none() {
            child::signal_group(self.pid, Signal::SIGKILL);
            let _ = self.child.lock().unwrap_or_else(|e| e.into_inner()).wait();
        }
    }
}

/// The last `lines` lines of a file (at most its last 64 KiB).
pub fn tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return format!("({} cannot be read)", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "a\nb\nc\nd\n").unwrap();
        assert_eq!(tail(&path, 2), "c\nd");
        assert_eq!(tail(&path, 10), "a\nb\nc\nd");
        assert!(tail(&dir.path().join("missing"), 2).contains("cannot be read"));
    }
}
