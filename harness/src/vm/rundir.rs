//! Where a running VM keeps its sockets, logs and pid file ([`RunDir`]), so that other processes
//! (`harness vm exec|cp|shell`, `harness lab down`, the stale-lab sweep) can find it.
//!
//! Layout, for VM `<name>` of lab `<lab>`:
//!
//! ```text
//! $LAB_RUN_DIR/<lab>/vms/<name>/      LAB_RUN_DIR defaults to /run/unbounded-lab
//!   qmp.sock      QMP monitor (unix socket, QEMU listens; one client at a time)
//!   qga.sock      QEMU guest agent, virtio-serial port org.qemu.guest_agent.0
//!   ready.sock    virtio-serial port org.unbounded.ready: the guest writes `READY <boot_id>`
//!   data.sock     virtio-serial port org.unbounded.data: raw bytes of file copies
//!   hvc0.sock     virtconsole hvc0 with a root shell (`harness vm shell`)
//!   console.log   serial console ttyS0
//!   qemu.stderr   QEMU's stdout and stderr
//!   qemu.pid      QEMU's pid (it leads its own process group)
//!   vm.json       what was booted: lab, name, accel, overlay path, image, netns
//! $LAB_STATE_DIR/<lab>/<name>.qcow2   the VM's disk overlay; LAB_STATE_DIR defaults to
//!                                     /var/tmp/unbounded-lab (overlays grow: not on a tmpfs)
//! ```
//!
//! The socket chardevs accept one client at a time; the harness connects to `qmp.sock` and
//! `qga.sock` per operation and holds only `ready.sock` open, so other processes can use them.

use std::fs;
use std::path::{Path, PathBuf};

/// The longest unix socket path the kernel accepts (`sun_path` is 108 bytes with its NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// A VM's run directory and overlay path (see the module docs for the layout).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunDir {
    dir: PathBuf,
    overlay: PathBuf,
}

/// What `vm.json` records.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct VmInfo {
    pub lab: String,
    pub name: String,
    pub accel: String,
    pub overlay: PathBuf,
    pub disk: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub netns: Option<String>,
    /// The kernel command line (a resumed guest runs with its saved boot's until it reboots).
    pub append: String,
    /// Resumed from a saved state or booted cold (absent in older files).
    #[serde(default)]
    pub boot_mode: Option<super::spec::BootMode>,
    /// The saved state's cache directory (its `booted.qcow2` backs the overlay).
    #[serde(default)]
    pub saved_state: Option<PathBuf>,
}

/// Why a run directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "socket path {path} is {len} bytes, over the kernel's {MAX_SOCKET_PATH}: use a shorter LAB_RUN_DIR or lab/VM name"
    )]
    SocketPathTooLong { path: PathBuf, len: usize },
    #[error(
        "VM {name} of lab {lab} is already running (QEMU pid {pid}, {dir}): stop it first (`harness lab down`)"
    )]
    AlreadyRunning {
        lab: String,
        name: String,
        pid: i32,
        dir: PathBuf,
    },
    #[error("no running VM named {name:?} under {root}{hint}")]
    NotFound {
        name: String,
        root: PathBuf,
        hint: String,
    },
    #[error("VM {name:?} exists in more than one lab ({labs}): pass --lab")]
    Ambiguous { name: String, labs: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunDirError + '_ {
    move |source| RunDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn env_dir(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default))
}

impl RunDir {
    /// `$LAB_RUN_DIR`, default `/run/unbounded-lab`.
    pub fn run_root() -> PathBuf {
        env_dir("LAB_RUN_DIR", "/run/unbounded-lab")
    }

    /// `$LAB_STATE_DIR`, default `/var/tmp/unbounded-lab`.
    pub fn state_root() -> PathBuf {
        env_dir("LAB_STATE_DIR", "/var/tmp/unbounded-lab")
    }

    /// The run directory of VM `name` in lab `lab` under the configured roots.
    pub fn new(lab: &str, name: &str) -> RunDir {
        RunDir::at(&RunDir::run_root(), &RunDir::state_root(), lab, name)
    }

    /// The run directory under explicit roots.
    pub fn at(run_root: &Path, state_root: &Path, lab: &str, name: &str) -> RunDir {
        RunDir {
            dir: run_root.join(lab).join("vms").join(name),
            overlay: state_root.join(lab).join(format!("{name}.qcow2")),
        }
    }

    /// Finds a running VM's directory by name; `lab` narrows the search (else the name must be
    /// unique among all labs under [`RunDir::run_root`]).
    pub fn find(name: &str, lab: Option<&str>) -> Result<RunDir, RunDirError> {
        let root = RunDir::run_root();
        let mut found = Vec::new();
        let labs: Vec<String> = match lab {
            Some(lab) => vec![lab.to_string()],
            None => fs::read_dir(&root)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default(),
        };
        for lab in labs {
            let run = RunDir::new(&lab, name);
            if run.dir.join("qemu.pid").is_file() {
                found.push((lab, run));
            }
        }
        match found.len() {
            1 => Ok(found.remove(0).1),
            0 => Err(RunDirError::NotFound {
                name: name.to_string(),
                root: root.clone(),
                hint: match lab {
                    Some(lab) => format!(" in lab {lab} (is `harness lab up` running?)"),
                    None => " (is `harness lab up` running?)".into(),
                },
            }),
            _ => Err(RunDirError::Ambiguous {
                name: name.to_string(),
                labs: found
                    .iter()
                    .map(|(l, _)| l.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn overlay(&self) -> &Path {
        &self.overlay
    }
    pub fn qmp(&self) -> PathBuf {
        self.dir.join("qmp.sock")
    }
    pub fn qga(&self) -> PathBuf {
        self.dir.join("qga.sock")
    }
    pub fn ready(&self) -> PathBuf {
        self.dir.join("ready.sock")
    }
    pub fn data(&self) -> PathBuf {
        self.dir.join("data.sock")
    }
    pub fn hvc0(&self) -> PathBuf {
        self.dir.join("hvc0.sock")
    }
    pub fn console(&self) -> PathBuf {
        self.dir.join("console.log")
    }
    pub fn stderr(&self) -> PathBuf {
        self.dir.join("qemu.stderr")
    }
    pub fn pid_file(&self) -> PathBuf {
        self.dir.join("qemu.pid")
    }
    pub fn info_file(&self) -> PathBuf {
        self.dir.join("vm.json")
    }

    /// Fails if any socket path would be too long for a unix socket.
    pub fn check_socket_paths(&self) -> Result<(), RunDirError> {
        for path in [self.qmp(), self.qga(), self.ready(), self.data(), self.hvc0()] {
            let len = path.as_os_str().len();
            if len > MAX_SOCKET_PATH {
                return Err(RunDirError::SocketPathTooLong { path, len });
            }
        }
        Ok(())
    }

    /// QEMU's pid from the pid file, if there is one.
    pub fn pid(&self) -> Option<i32> {
        fs::read_to_string(self.pid_file()).ok()?.trim().parse().ok()
    }

    /// The pid of a live process recorded in the pid file.
    pub fn running_pid(&self) -> Option<i32> {
        self.pid()
            .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
    }

    /// Makes an empty run directory (and the overlay's directory); fails if a QEMU recorded
    /// there still runs, removes what a dead one left.
    pub fn prepare(&self, lab: &str, name: &str) -> Result<(), RunDirError> {
        self.check_socket_paths()?;
        if let Some(pid) = self.running_pid() {
            return Err(RunDirError::AlreadyRunning {
                lab: lab.to_string(),
                name: name.to_string(),
                pid,
                dir: self.dir.clone(),
            });
        }
        if self.dir.exists() {
            fs::remove_dir_all(&self.dir).map_err(io(&self.dir))?;
        }
        fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        if let Some(parent) = self.overlay.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        Ok(())
    }

    /// Writes `vm.json`.
    pub fn write_info(&self, info: &VmInfo) -> Result<(), RunDirError> {
        let path = self.info_file();
        let text = serde_json::to_string_pretty(info).expect("VmInfo serialises");
        fs::write(&path, text + "\n").map_err(io(&path))
    }

    /// Reads `vm.json`.
    pub fn read_info(&self) -> Result<VmInfo, RunDirError> {
        let path = self.info_file();
        let text = fs::read_to_string(&path).map_err(io(&path))?;
        serde_json::from_str(&text).map_err(|e| RunDirError::Io {
            path,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    /// Removes the overlay and the run directory, then the `vms/` and lab directories if they
    /// became empty. What is already gone is fine.
    pub fn remove(&self) -> Result<(), RunDirError> {
        match fs::remove_file(&self.overlay) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&self.overlay)(e)),
            _ => {}
        }
        if self.dir.exists() {
            fs::remove_dir_all(&self.dir).map_err(io(&self.dir))?;
        }
        // Only empty directories go; errors (not empty, gone) are expected.
        if let Some(vms) = self.dir.parent() {
            let _ = fs::remove_dir(vms);
            if let Some(lab) = vms.parent() {
                let _ = fs::remove_dir(lab);
            }
        }
        if let Some(lab_state) = self.overlay.parent() {
            let _ = fs::remove_dir(lab_state);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_puts_sockets_in_the_vm_directory_and_the_overlay_in_state() {
        let run = RunDir::at(Path::new("/run/u"), Path::new("/var/tmp/u"), "lab-1", "node1");
        assert_eq!(run.qmp(), Path::new("/run/u/lab-1/vms/node1/qmp.sock"));
        assert_eq!(run.hvc0(), Path::new("/run/u/lab-1/vms/node1/hvc0.sock"));
        assert_eq!(run.overlay(), Path::new("/var/tmp/u/lab-1/node1.qcow2"));
        assert!(run.check_socket_paths().is_ok());
    }

    #[test]
    fn too_long_socket_paths_are_refused_with_their_length() {
        let long = "x".repeat(100);
        let run = RunDir::at(Path::new(&format!("/{long}")), Path::new("/s"), "lab-1", "node1");
        let err = run.check_socket_paths().unwrap_err().to_string();
        assert!(err.contains("over the kernel's 107"), "{err}");
    }

    #[test]
    fn prepare_refuses_a_live_pid_and_cleans_a_dead_one() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::at(
            &tmp.path().join("run"),
            &tmp.path().join("state"),
            "lab-1",
            "node1",
        );
        run.prepare("lab-1", "node1").unwrap();
        fs::write(run.pid_file(), std::process::id().to_string()).unwrap();
        let err = run.prepare("lab-1", "node1").unwrap_err();
        assert!(matches!(err, RunDirError::AlreadyRunning { .. }), "{err}");
        fs::write(run.pid_file(), "999999999").unwrap();
        fs::write(run.console(), "old").unwrap();
        run.prepare("lab-1", "node1").unwrap();
        assert!(!run.console().exists());
        fs::write(run.overlay(), "disk").unwrap();
        run.remove().unwrap();
        assert!(!run.dir().exists() && !run.overlay().exists());
        assert!(
            !tmp.path().join("run/lab-1").exists(),
            "empty lab directory left behind"
        );
        run.remove().unwrap();
    }
}
