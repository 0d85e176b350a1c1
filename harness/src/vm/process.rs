//! The QEMU process: started in its own process group with `PR_SET_PDEATHSIG` (so it dies with
//! the harness), optionally inside a network namespace; reaped by a watcher thread that records
//! its exit; killed as a group.

use std::fs::File;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::child;

/// What the watcher threads of one VM have seen: QEMU's exit and the guest's `READY` lines.
#[derive(Default)]
pub struct Events {
    state: Mutex<EventState>,
    changed: Condvar,
}

/// The recorded events.
#[derive(Clone, Debug, Default)]
pub struct EventState {
    /// QEMU's exit status once it exited.
    pub exit: Option<ExitStatus>,
    /// Every boot id announced, in order.
    pub ready: Vec<String>,
}

impl Events {
    pub fn update(&self, f: impl FnOnce(&mut EventState)) {
        f(&mut self.state.lock().expect("events lock"));
        self.changed.notify_all();
    }

    pub fn snapshot(&self) -> EventState {
        self.state.lock().expect("events lock").clone()
    }

    /// Waits until `done` says yes or `until` passes; returns the last state seen.
    pub fn wait_for(&self, until: Instant, mut done: impl FnMut(&EventState) -> bool) -> EventState {
        let _waiting = crate::phase_clock::enter(crate::phase_clock::Phase::Waiting);
        let mut state = self.state.lock().expect("events lock");
        loop {
            if done(&state) {
                return state.clone();
            }
            let now = Instant::now();
            if now >= until {
                return state.clone();
            }
            state = self
                .changed
                .wait_timeout(state, until - now)
                .expect("events lock")
                .0;
        }
    }
}

/// A started QEMU (the leader of its own process group).
pub struct QemuProcess {
    pid: i32,
    events: Arc<Events>,
}

impl QemuProcess {
    /// Starts `cmd` (stdin null, stdout and stderr appended to `log`) in a new process group,
    /// with SIGKILL as its parent-death signal, inside `netns` (`/run/netns/<name>`) if given.
    pub fn spawn(
        mut cmd: Command,
        netns: Option<&str>,
        log: &Path,
        events: Arc<Events>,
    ) -> std::io::Result<QemuProcess> {
        let out = File::options().create(true).append(true).open(log)?;
        cmd.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
        let netns_file = match netns {
            Some(name) => Some(File::open(format!("/run/netns/{name}")).map_err(|e| {
                std::io::Error::new(e.kind(), format!("network namespace /run/netns/{name}: {e}"))
            })?),
            None => None,
        };
        let mut child = child::spawn(cmd, netns_file.as_ref())?;
        drop(netns_file);
        let pid = child.id() as i32;
        let watcher_events = Arc::clone(&events);
        std::thread::Builder::new()
            .name(format!("qemu-wait-{pid}"))
            .spawn(move || {
                let status = child.wait();
                watcher_events.update(|s| {
                    s.exit =
                        Some(status.unwrap_or_else(|_| std::os::unix::process::ExitStatusExt::from_raw(-1)))
                });
            })?;
        Ok(QemuProcess { pid, events })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// QEMU's exit status once it exited.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.events.snapshot().exit
    }

    /// Waits up to `timeout` for QEMU to exit.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        self.events
            .wait_for(Instant::now() + timeout, |s| s.exit.is_some())
            .exit
    }

    /// SIGKILLs QEMU's process group (if QEMU has not exited) and waits for the exit.
    pub fn kill(&self, timeout: Duration) -> Option<ExitStatus> {
        if self.exit_status().is_none() {
            child::signal_group(self.pid, Signal::SIGKILL);
        }
        self.wait_exit(timeout)
    }

    /// Whether any process of QEMU's group is still alive (checked after the kill).
    pub fn group_alive(&self) -> bool {
        child::group_alive(self.pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_group_is_killed_and_its_exit_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("log");
        let events = Arc::new(Events::default());
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo started; sleep 300 & sleep 300"]);
        let p = QemuProcess::spawn(cmd, None, &log, Arc::clone(&events)).unwrap();
        assert!(p.exit_status().is_none());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&log).unwrap().contains("started") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = p.kill(Duration::from_secs(10)).expect("exits after SIGKILL");
        assert!(!status.success());
        // The background `sleep` of the same group died too.
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.group_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!p.group_alive(), "a process of the group survived");
    }

    #[test]
    fn own_exit_is_seen_by_the_watcher() {
        let tmp = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 7"]);
        let p = QemuProcess::spawn(cmd, None, &tmp.path().join("log"), Arc::default()).unwrap();
        let status = p.wait_exit(Duration::from_secs(10)).unwrap();
        assert_eq!(status.code(), Some(7));
    }

    #[test]
    fn missing_namespace_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let err = QemuProcess::spawn(
            Command::new("true"),
            Some("no-such-ns"),
            &tmp.path().join("l"),
            Arc::default(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("/run/netns/no-such-ns"), "{err}");
    }
}
