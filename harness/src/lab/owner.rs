//! Who owns which lab, and the sweep of labs whose owner died.
//!
//! Lab `lab-<n>` is owned by the process named in `$LAB_RUN_DIR/lab-<n>/owner.pid`
//! (`LAB_RUN_DIR` defaults to `/run/unbounded-lab`; the VMs' run directories are
//! `$LAB_RUN_DIR/lab-<n>/vms/<vm>/`, see [`crate::vm::rundir`])
//! (`<pid> <start time>`, so a reused pid is not mistaken for the owner). The
//! file is written before the namespace is made and removed after it is gone,
//! all under one lock (`$LAB_RUN_DIR/.lock`), so a namespace `lab-*` or a
//! directory whose owner is not alive is stale: its processes (QEMU) are
//! killed, the namespace deleted, the run directory and the VMs' overlays
//! (`$LAB_STATE_DIR/lab-<n>/`) removed.

use std::fs::{self, File};
use std::path::PathBuf;
use std::time::Duration;

use super::error::{LabError, io_err};
use crate::addresses::{LabAddrs, MAX_LAB};
use crate::netns;
use crate::vm::RunDir;

const OWNER_FILE: &str = "owner.pid";

/// Where labs keep their owner files and run-time files (short paths, for unix sockets).
pub fn run_root() -> PathBuf {
    RunDir::run_root()
}

/// The run directory of a lab, `$LAB_RUN_DIR/lab-<n>`.
pub fn run_dir(name: &str) -> PathBuf {
    run_root().join(name)
}

/// Where the lab's VM overlays live, `$LAB_STATE_DIR/lab-<n>`.
pub fn state_dir(name: &str) -> PathBuf {
    RunDir::state_root().join(name)
}

/// The path of a lab's owner file.
pub fn owner_file(name: &str) -> PathBuf {
    run_dir(name).join(OWNER_FILE)
}

/// A process, identified across pid reuse by its start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub pid: i32,
    pub start_time: u64,
}

impl Owner {
    /// This process.
    pub fn me() -> Owner {
        let pid = std::process::id() as i32;
        Owner {
            pid,
            start_time: start_time(pid).unwrap_or(0),
        }
    }

    /// Whether that process still runs (same pid, same start time, not a zombie).
    pub fn is_alive(&self) -> bool {
        matches!(stat(self.pid), Some((state, start)) if state != "Z" && start == self.start_time)
    }
}

/// Fields 3 (state) and 22 (start time in clock ticks since boot) of `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(String, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.to_string();
    Some((state, fields.nth(18)?.parse().ok()?))
}

fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|(_, start)| start)
}

/// Reads a lab's owner file; `None` when it is missing or unreadable.
pub fn read_owner(name: &str) -> Option<Owner> {
    let text = fs::read_to_string(owner_file(name)).ok()?;
    let mut parts = text.split_whitespace();
    Some(Owner {
        pid: parts.next()?.parse().ok()?,
        start_time: parts.next()?.parse().ok()?,
    })
}

fn write_owner(name: &str, owner: Owner) -> Result<(), LabError> {
    let dir = run_dir(name);
    fs::create_dir_all(&dir).map_err(io_err("creating lab run directory", &dir))?;
    let path = owner_file(name);
    fs::write(&path, format!("{} {}\n", owner.pid, owner.start_time))
        .map_err(io_err("writing lab owner file", &path))
}

/// The lock every claim, release and sweep holds.
pub struct RunLock(#[allow(dead_code)] File);

pub fn lock() -> Result<RunLock, LabError> {
    let root = run_root();
    fs::create_dir_all(&root).map_err(io_err("creating", &root))?;
    let path = root.join(".lock");
    let file = File::create(&path).map_err(io_err("opening lab lock", &path))?;
    file.lock().map_err(io_err("locking", &path))?;
    Ok(RunLock(file))
}

/// Names of every lab that is claimed or exists: a namespace `lab-*` or a run
/// directory with an owner file. (A run directory without one holds only what
/// `LAB_KEEP=1` kept for inspection; nobody sweeps it.)
pub fn known_labs() -> Vec<String> {
    let mut names = netns::list("lab-");
    if let Ok(entries) = fs::read_dir(run_root()) {
        names.extend(
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with("lab-") && owner_file(n).exists()),
        );
    }
    names.sort();
    names.dedup();
    names
}

/// Removes a lab whatever state it is in: removes its Kind cluster's node containers, kills the
/// processes in its namespace, deletes the namespace, removes its run directory. Tolerates
/// what is already gone; returns what could not be removed.
pub fn destroy(name: &str) -> Vec<String> {
    let mut problems = crate::kind::cluster::remove_leftover_nodes(name);
    if let Some(inode) = netns::inode(name) {
        let left = netns::kill_all_in(inode, Duration::from_secs(5));
        for pid in left {
            problems.push(format!(
                "process {pid} ({}) survived SIGKILL",
                netns::cmdline(pid)
            ));
        }
        if let Err(err) = netns::delete(name)
            && netns::exists(name)
        {
            problems.push(format!("namespace {name}: {err}"));
        }
    }
    for dir in [run_dir(name), state_dir(name)] {
        if dir.exists()
            && let Err(err) = fs::remove_dir_all(&dir)
        {
            problems.push(format!("{}: {err}", dir.display()));
        }
    }
    problems
}

/// Sweeps every lab whose owner is not alive (the caller holds the lock);
/// returns the names swept.
fn sweep_locked() -> Vec<String> {
    let mut swept = Vec::new();
    for name in known_labs() {
        if read_owner(&name).is_some_and(|o| o.is_alive()) {
            continue;
        }
        tracing::info!(lab = %name, "sweeping a stale lab");
        for problem in destroy(&name) {
            tracing::warn!(lab = %name, "stale lab not fully removed: {problem}");
        }
        swept.push(name);
    }
    swept
}

/// Sweeps every stale lab; returns the names swept.
pub fn sweep_stale() -> Result<Vec<String>, LabError> {
    let _lock = lock()?;
    Ok(sweep_locked())
}

/// Which lab number to claim.
#[derive(Clone, Copy, Debug)]
pub enum Want {
    /// Exactly this number (`harness lab up` uses 0); fails if it is owned.
    Exactly(u8),
    /// This number if free, else the next free one above it (wrapping to 1).
    Prefer(u8),
}

/// Sweeps stale labs and claims a lab number for this process.
/// Returns the number and the names of the stale labs swept.
pub fn claim(want: Want) -> Result<(LabAddrs, Vec<String>), LabError> {
    let _lock = lock()?;
    let swept = sweep_locked();
    let candidates: Vec<u8> = match want {
        Want::Exactly(n) => vec![n],
        Want::Prefer(n) => (n..=MAX_LAB).chain(1..n).collect(),
    };
    for n in candidates {
        let addrs = LabAddrs::new(n).ok_or(LabError::BadNumber(n.into()))?;
        let name = addrs.netns();
        if let Some(owner) = read_owner(&name).filter(|o| o.is_alive()) {
            if let Want::Exactly(_) = want {
                return Err(LabError::InUse {
                    cmdline: netns::cmdline(owner.pid),
                    name,
                    pid: owner.pid,
                });
            }
            continue;
        }
        if netns::exists(&name) {
            continue; // stale but not removable; the sweep logged why
        }
        write_owner(&name, Owner::me())?;
        return Ok((addrs, swept));
    }
    let from = match want {
        Want::Exactly(n) | Want::Prefer(n) => n,
    };
    Err(LabError::NoFreeNumber { from, to: MAX_LAB })
}

/// Gives up this process's claim on a lab (the namespace must be gone
/// already): removes its run directory and its VMs' overlays, or with `keep`
/// (`LAB_KEEP=1`) only the owner file.
pub fn release(name: &str, keep: bool) -> Result<(), LabError> {
    let _lock = lock()?;
    let remove = |path: &std::path::Path, result: std::io::Result<()>| match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err("removing", path)(e)),
        _ => Ok(()),
    };
    if keep {
        let path = owner_file(name);
        return remove(&path, fs::remove_file(&path));
    }
    for dir in [run_dir(name), state_dir(name)] {
        remove(&dir, fs::remove_dir_all(&dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_finished_one_is_not() {
        assert!(Owner::me().is_alive());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let started = start_time(pid);
        child.wait().unwrap();
        let gone = Owner {
            pid,
            start_time: started.unwrap_or(1),
        };
        assert!(!gone.is_alive());
        let reused = Owner {
            start_time: Owner::me().start_time + 1,
            ..Owner::me()
        };
        assert!(
            !reused.is_alive(),
            "a pid with another start time is another process"
        );
    }
}
