//! Children that die with the harness: forked from one long-lived thread, in their own process
//! group, with PR_SET_PDEATHSIG.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

type SpawnJob = Box<dyn FnOnce() + Send>;

/// Children are forked from one thread that lives as long as the process: `PR_SET_PDEATHSIG`
/// fires when the forking *thread* exits, so forking from a short-lived thread (a test's, a
/// blocking pool's) would kill the child early.
fn spawner() -> &'static Mutex<mpsc::Sender<SpawnJob>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("child-spawner".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .expect("starting the child spawner thread");
        Mutex::new(tx)
    })
}

/// Spawns `cmd` (its stdio already set by the caller) as the leader of a new process group,
/// with SIGKILL as its parent-death signal, inside the network namespace `netns` (an open
/// `/run/netns/<name>`) if given. The child exits at once when the harness died before it
/// could arm the signal.
pub fn spawn(mut cmd: Command, netns: Option<&File>) -> std::io::Result<Child> {
    cmd.process_group(0);
    let netns_fd = netns.map(|f| f.as_raw_fd());
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe system calls run between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = netns_fd
                && libc::setns(fd, libc::CLONE_NEWNET) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nobody would kill us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel::<std::io::Result<Child>>();
    spawner()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send(Box::new(move || {
            let _ = tx.send(cmd.spawn());
        }))
        .expect("the spawner thread runs for the whole process");
    // `netns` (borrowed) stays open until here, after the fork has entered it.
    rx.recv().expect("the spawner answers")
}

/// Sends `signal` to the process group led by `pid` (a group already gone is fine).
pub fn signal_group(pid: i32, signal: Signal) {
    let _ = killpg(Pid::from_raw(pid), signal);
}

/// Whether any process of the group led by `pid` is still alive.
pub fn group_alive(pid: i32) -> bool {
    killpg(Pid::from_raw(pid), None).is_ok()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn child_outlives_the_short_lived_thread_that_started_it() {
        let child = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("300");
            spawn(cmd, None).unwrap()
        })
        .join()
        .unwrap();
        let mut child = child;
        // Had that thread forked it, the thread's exit would have SIGKILLed it by now.
        std::thread::sleep(Duration::from_millis(300));
        let still_running = child.try_wait().unwrap().is_none();
        signal_group(child.id() as i32, Signal::SIGKILL);
        let _ = child.wait();
        assert!(still_running, "the child died with the thread that asked for it");
    }

    #[test]
    fn child_leads_its_own_process_group_which_dies_as_one() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 300 & sleep 300"]);
        let mut child = spawn(cmd, None).unwrap();
        let pid = child.id() as i32;
        let group = nix::unistd::getpgid(Some(Pid::from_raw(pid))).unwrap();
        assert_eq!(group.as_raw(), pid, "not the leader of its own process group");
        assert!(group_alive(pid));
        signal_group(pid, Signal::SIGKILL);
        let status = child.wait().unwrap();
        assert!(!status.success());
        let deadline = Instant::now() + Duration::from_secs(5);
        while group_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!group_alive(pid), "a process of the group survived");
    }
}
