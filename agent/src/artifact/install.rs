//! Atomic installation: the new file is written beside its destination,
//! synced, made executable, checked, then renamed over the old one.
//!
//! Until [`Staging::commit`] nothing is visible at the destination, and on any
//! failure the temporary files and the directories created for them are removed.

use std::fs::{self, File, Permissions};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tempfile::{NamedTempFile, TempPath};

use super::ArtifactError;
use super::error::io_err;

/// Where an artifact is being prepared; cleans up after itself unless committed.
pub struct Staging {
    dir: PathBuf,
    dest: PathBuf,
    created_dirs: Vec<PathBuf>,
    committed: bool,
}

impl Staging {
    /// Prepares to install at `dest`, creating its missing parent directories.
    pub fn new(dest: &Path) -> Result<Staging, ArtifactError> {
        let dir = dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .ok_or_else(|| ArtifactError::InvalidSource {
                field: "install destination".into(),
                reason: format!("{} has no parent directory", dest.display()),
            })?
            .to_path_buf();
        let mut missing = Vec::new();
        let mut probe = Some(dir.as_path());
        while let Some(p) = probe.filter(|p| !p.exists()) {
            missing.push(p.to_path_buf());
            probe = p.parent();
        }
        let mut staging = Staging {
            dir: dir.clone(),
            dest: dest.to_path_buf(),
            created_dirs: Vec::new(),
            committed: false,
        };
        for p in missing.into_iter().rev() {
            fs::create_dir(&p).map_err(io_err("create directory", &p))?;
            staging.created_dirs.push(p);
        }
        Ok(staging)
    }

    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// A new temporary file `.<name>.<purpose>-XXXXXX` in the destination's directory.
    pub fn temp_file(&self, purpose: &str) -> Result<NamedTempFile, ArtifactError> {
        let name = self.dest.file_name().unwrap_or_default().to_string_lossy();
        tempfile::Builder::new()
            .prefix(&format!(".{name}.{purpose}-"))
            .tempfile_in(&self.dir)
            .map_err(io_err("create a temporary file in", &self.dir))
    }

    /// Makes `file` executable (0755), syncs and closes it, ready to be run and committed.
    pub fn seal_executable(&self, file: NamedTempFile) -> Result<TempPath, ArtifactError> {
        let path = file.path().to_path_buf();
        file.as_file()
            .set_permissions(Permissions::from_mode(0o755))
            .map_err(io_err("chmod", &path))?;
        file.as_file().sync_all().map_err(io_err("sync", &path))?;
        Ok(file.into_temp_path())
    }

    /// Renames the sealed file over the destination and syncs the directory.
    pub fn commit(mut self, sealed: TempPath) -> Result<PathBuf, ArtifactError> {
        sealed.persist(&self.dest).map_err(|e| ArtifactError::Io {
            action: "rename into place",
            path: self.dest.clone(),
            source: e.error,
        })?;
        self.committed = true;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err("sync directory", &self.dir))?;
        Ok(self.dest.clone())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        for dir in self.created_dirs.iter().rev() {
            // Only empty directories we created; anything else stays.
            let _ = fs::remove_dir(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn committed_file_replaces_the_old_one_with_mode_0755() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("usr/local/bin/tool");
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        fs::write(&dest, "old").unwrap();
        let staging = Staging::new(&dest).unwrap();
        let mut file = staging.temp_file("new").unwrap();
        file.write_all(b"new").unwrap();
        let sealed = staging.seal_executable(file).unwrap();
        staging.commit(sealed).unwrap();
        assert_eq!(fs::read_to_string(&dest).unwrap(), "new");
        assert_eq!(fs::metadata(&dest).unwrap().permissions().mode() & 0o7777, 0o755);
        assert_eq!(fs::read_dir(dest.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn abandoned_staging_leaves_no_file_and_no_new_directory() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("usr/local/bin/tool");
        {
            let staging = Staging::new(&dest).unwrap();
            let mut file = staging.temp_file("new").unwrap();
            file.write_all(b"x").unwrap();
            let _sealed = staging.seal_executable(file).unwrap();
        }
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0);
    }
}
