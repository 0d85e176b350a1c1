//! [`Netns`]: a named network namespace of a live LocalDNS, deleted with its processes on drop;
//! [`BackHome`]: the calling thread's way back to the namespace it started in.

use std::ffi::OsStr;
use std::fs::File;
use std::process::Command;

use agent::exec;

use super::error::{LiveError, io_err};

/// A named network namespace, deleted (with every process in it killed) on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// `ip netns add h6<role><id>` with its `lo` up.
    pub fn new(role: &str, id: &str) -> Result<Netns, LiveError> {
        let name = format!("h6{role}{id}");
        exec::run(Command::new("ip").args(["netns", "add", &name]))?;
        let ns = Netns { name };
        ns.run(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// `program` to run in this namespace (`ip netns exec`).
    pub fn cmd(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Runs `argv` in this namespace; its stdout.
    pub fn run(&self, argv: &[&str]) -> Result<String, LiveError> {
        let (program, args) = argv.split_first().expect("a command line has a program");
        Ok(exec::run_stdout(self.cmd(program).args(args))?)
    }

    /// Moves the calling thread (and what it starts) into this namespace.
    pub fn enter(&self) -> Result<(), LiveError> {
        let path = format!("/run/netns/{}", self.name);
        let file = File::open(&path).map_err(io_err("opening", &path))?;
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|source| LiveError::Setns {
            netns: self.name.clone(),
            source,
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Ok(pids) = exec::run_stdout(Command::new("ip").args(["netns", "pids", &self.name])) {
            for pid in pids.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
            }
        }
        let _ = exec::run_unchecked(Command::new("ip").args(["netns", "del", &self.name]));
    }
}

/// Takes the calling thread back to the network namespace it started in, on drop.
/// [`super::Lab::build`] moves the calling thread into the node namespace, and dropping the
/// [`super::Lab`] kills every process `ip netns pids` finds there: this one too (exit 137, the
/// node namespace left behind) when the thread is its main thread, unless it left first.
pub struct BackHome(pub File);

impl BackHome {
    /// The calling thread's namespace now, to go back to.
    pub fn here() -> Result<BackHome, LiveError> {
        let path = "/proc/thread-self/ns/net";
        Ok(BackHome(File::open(path).map_err(io_err("opening", path))?))
    }
}

impl Drop for BackHome {
    fn drop(&mut self) {
        if let Err(e) = nix::sched::setns(&self.0, nix::sched::CloneFlags::CLONE_NEWNET) {
            eprintln!("could not go back to the starting network namespace: {e}");
        }
    }
}
