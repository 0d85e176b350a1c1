//! File utilities for everything the agent writes on a host: a path below a root directory, a
//! file written atomically (temporary file beside it, fsynced, renamed into place, mode set) and
//! a symlink replaced atomically; [`beneath`] reaches a path inside a machine root without leaving it.

pub mod beneath;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// `root` joined with an absolute path (`/` + `/etc/x` → `/etc/x`).
pub fn under(root: &Path, absolute: &Path) -> PathBuf {
    root.join(absolute.strip_prefix("/").unwrap_or(absolute))
}

fn parent(path: &Path) -> std::io::Result<&Path> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("path has no parent directory"))?;
    std::fs::create_dir_all(dir)?;
    Ok(dir)
}

/// Writes `contents` to `path` atomically with `mode`.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = parent(path)?;
    let mut tmp = tempfile::Builder::new().prefix(".unbounded-").tempfile_in(dir)?;
    tmp.write_all(contents)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Points the symlink `path` at `target`, replacing whatever is there atomically.
pub fn link_atomic(path: &Path, target: &Path) -> std::io::Result<()> {
    if std::fs::read_link(path).is_ok_and(|t| t == target) {
        return Ok(());
    }
    let dir = parent(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".unbounded-{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, path)
}
