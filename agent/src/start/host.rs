//! Stage `preparing-host`: the kernel modules and settings the node needs, now and after a
//! reboot (`/etc/modules-load.d/`, `/etc/sysctl.d/`). Idempotent: a module already loaded and a
//! setting already at its value are left alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::StartError;
use super::files::write_changed;
use crate::exec;
use crate::render::Rendered;
use crate::render::host_prep::{MODULES, MODULES_FILE, SYSCTL_FILE, SYSCTLS, proc_sys_path};

/// What host preparation changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HostChanges {
    pub files: Vec<PathBuf>,
    pub modules_loaded: Vec<String>,
    pub sysctls_set: Vec<String>,
}

impl HostChanges {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.modules_loaded.is_empty() && self.sysctls_set.is_empty()
    }
}

/// Writes the persistent files below `root`, loads the modules, sets the sysctls (on the
/// running kernel, whatever `root` is).
pub fn prepare(root: &Path, rendered: &Rendered) -> Result<HostChanges, StartError> {
    let files = write_changed(root, rendered, |p| {
        p == Path::new(SYSCTL_FILE) || p == Path::new(MODULES_FILE)
    })?;
    let mut modules_loaded = Vec::new();
    for module in MODULES {
        if !Path::new("/sys/module").join(module).exists() {
            exec::run(Command::new("modprobe").arg(module))?;
            modules_loaded.push(module.to_owned());
        }
    }
    let mut sysctls_set = Vec::new();
    for (key, value) in SYSCTLS {
        let path = proc_sys_path(key);
        let current = std::fs::read_to_string(&path).map_err(|source| StartError::Io {
            action: "read",
            path: path.clone().into(),
            source,
        })?;
        if current.split_whitespace().collect::<Vec<_>>().join(" ") != value {
            std::fs::write(&path, value).map_err(|source| StartError::Io {
                action: "write",
                path: path.clone().into(),
                source,
            })?;
            sysctls_set.push(format!("{key}={value}"));
        }
    }
    Ok(HostChanges {
        files,
        modules_loaded,
        sysctls_set,
    })
}
