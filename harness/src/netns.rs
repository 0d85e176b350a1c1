//! The lab's network namespace, bridge and taps (made with `ip`), and the
//! processes and threads living in a namespace (found through `/proc`).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use agent::exec;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::addresses::{LabAddrs, PREFIX_LEN};

/// What went wrong with a namespace: an `ip` command, a file, or the thread entering it.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error(transparent)]
    Command(#[from] exec::CommandFailed),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the thread entering {0} panicked")]
    ThreadPanicked(String),
}

fn io_err(what: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> NetnsError {
    let path = path.to_path_buf();
    move |source| NetnsError::Io { what, path, source }
}

/// Where `ip netns` keeps its named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// The bind mount that names namespace `name`.
pub fn netns_path(name: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(name)
}

/// Whether the named namespace exists.
pub fn exists(name: &str) -> bool {
    netns_path(name).exists()
}

/// The names of every namespace starting with `prefix`.
pub fn list(prefix: &str) -> Vec<String> {
    let Ok(entries) = fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

fn ip(args: &[&str]) -> Result<(), NetnsError> {
    exec::run(Command::new("ip").args(args))?;
    Ok(())
}

/// Creates namespace `lab-<n>` with `lo` up and bridge `labbr<n>` at `192.168.100.1/24` (and
/// `192.168.100.2/24`, the second upstream DNS address) with the MAC every lab's bridge has.
pub fn create(addrs: &LabAddrs) -> Result<(), NetnsError> {
    let ns = addrs.netns();
    let bridge = addrs.bridge();
    let cidr = format!("{}/{}", addrs.bridge_ip(), PREFIX_LEN);
    ip(&["netns", "add", &ns])?;
    ip(&["-n", &ns, "link", "set", "lo", "up"])?;
    let mac = addrs.bridge_mac();
    ip(&[
        "-n", &ns, "link", "add", &bridge, "address", mac, "type", "bridge",
    ])?;
    ip(&["-n", &ns, "addr", "add", &cidr, "dev", &bridge])?;
    let second = format!("{}/{}", addrs.second_dns_ip(), PREFIX_LEN);
    ip(&["-n", &ns, "addr", "add", &second, "dev", &bridge])?;
    ip(&["-n", &ns, "link", "set", &bridge, "up"])?;
    Ok(())
}

/// Creates tap `labtap<n>-<k>` inside the namespace, attached to the bridge and up.
/// QEMU opens it by name (`-netdev tap,ifname=...,script=no,downscript=no`) from inside the namespace.
pub fn add_tap(addrs: &LabAddrs, k: u8) -> Result<String, NetnsError> {
    let ns = addrs.netns();
    let tap = addrs.tap(k);
    ip(&["-n", &ns, "tuntap", "add", "dev", &tap, "mode", "tap"])?;
    ip(&["-n", &ns, "link", "set", &tap, "master", &addrs.bridge()])?;
    ip(&["-n", &ns, "link", "set", &tap, "up"])?;
    Ok(tap)
}

/// Deletes the named namespace (its bridge and taps go with it).
pub fn delete(name: &str) -> Result<(), NetnsError> {
    ip(&["netns", "del", name])
}

/// The inode identifying the namespace's kernel object, while it is named.
pub fn inode(name: &str) -> Option<u64> {
    fs::metadata(netns_path(name)).ok().map(|m| m.ino())
}

fn net_inode_of(path: &str) -> Option<u64> {
    let link = fs::read_link(path).ok()?;
    let link = link.to_str()?;
    link.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

fn numeric_dirs(path: &str) -> Vec<i32> {
    let Ok(entries) = fs::read_dir(path) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Processes whose network namespace is `ns_inode`.
pub fn pids_in(ns_inode: u64) -> Vec<i32> {
    numeric_dirs("/proc")
        .into_iter()
        .filter(|pid| net_inode_of(&format!("/proc/{pid}/ns/net")) == Some(ns_inode))
        .collect()
}

/// Threads (as `pid/tid`) in namespace `ns_inode`, including threads that
/// entered it with `setns` while their process stayed outside.
pub fn tasks_in(ns_inode: u64) -> Vec<String> {
    let mut tasks = Vec::new();
    for pid in numeric_dirs("/proc") {
        for tid in numeric_dirs(&format!("/proc/{pid}/task")) {
            if net_inode_of(&format!("/proc/{pid}/task/{tid}/ns/net")) == Some(ns_inode) {
                tasks.push(format!("{pid}/{tid}"));
            }
        }
    }
    tasks
}

/// The command line of a process, for messages.
pub fn cmdline(pid: i32) -> String {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .split('\0')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "gone".to_string())
}

/// Kills (SIGKILL) every process in the namespace except this one and waits
/// up to `timeout` for them to go; returns the ones still there.
pub fn kill_all_in(ns_inode: u64, timeout: Duration) -> Vec<i32> {
    let me = std::process::id() as i32;
    let started = Instant::now();
    loop {
        let pids: Vec<i32> = pids_in(ns_inode).into_iter().filter(|p| *p != me).collect();
        if pids.is_empty() || started.elapsed() > timeout {
            return pids;
        }
        for pid in &pids {
            tracing::debug!(pid, cmdline = %cmdline(*pid), "killing a process left in the lab namespace");
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `f` on a fresh thread that has entered the named namespace; sockets
/// it creates stay bound inside the namespace wherever they are used later.
pub fn in_netns<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<std::io::Result<T>, NetnsError> {
    let path = netns_path(name);
    let file = fs::File::open(&path).map_err(io_err("opening network namespace", &path))?;
    let thread = std::thread::Builder::new()
        .name(format!("enter-{name}"))
        .spawn(move || -> std::io::Result<T> {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
            f()
        })
        .map_err(io_err("starting a thread for", &path))?;
    thread
        .join()
        .map_err(|_| NetnsError::ThreadPanicked(name.to_string()))
}

/// `ip netns exec <name> <program>`: a command run inside the namespace.
pub fn command_in(name: &str, program: &str) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", name, program]);
    cmd
}
