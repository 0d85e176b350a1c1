//! A local stand-in for `actions/upload-artifact` and `actions/download-artifact`: a job's
//! files copied into the rehearsal's directory by artifact name, and back into a later job's
//! workspace.

use std::path::{Path, PathBuf};
use std::process::Command;

use agent::exec::{CommandFailed, run};

/// Why an artifact could not be passed.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("artifact `{name}`: no file at {paths}")]
    NoFiles { name: String, paths: String },
    #[error("artifact `{name}` was never uploaded in this rehearsal (looked in {dir})")]
    NotUploaded { name: String, dir: PathBuf },
    #[error("artifact `{name}`: {source}")]
    Copy {
        name: String,
        #[source]
        source: CommandFailed,
    },
    #[error("artifact `{name}`: {path}: {source}")]
    Io {
        name: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What `if-no-files-found` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfNoFiles {
    Error,
    Warn,
    Ignore,
}

impl IfNoFiles {
    /// `error`, `warn` (the default) or `ignore`.
    pub fn parse(text: Option<&str>) -> IfNoFiles {
        match text {
            Some("error") => IfNoFiles::Error,
            Some("ignore") => IfNoFiles::Ignore,
            _ => IfNoFiles::Warn,
        }
    }
}

/// The artifacts of one rehearsal, under `<dir>/<name>/`.
#[derive(Clone, Debug)]
pub struct ArtifactStore {
    dir: PathBuf,
}

impl ArtifactStore {
    pub fn at(dir: &Path) -> ArtifactStore {
        ArtifactStore {
            dir: dir.to_path_buf(),
        }
    }

    /// Where artifact `name` is kept.
    pub fn path_of(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Copies `paths` (files, or directories' contents) into artifact `name`; the bytes copied,
    /// `Ok(0)` when nothing existed and `if_no_files` allows it.
    pub fn upload(
        &self,
        name: &str,
        paths: &[PathBuf],
        if_no_files: IfNoFiles,
    ) -> Result<u64, ArtifactError> {
        let existing: Vec<&PathBuf> = paths.iter().filter(|p| p.exists()).collect();
        if existing.is_empty() {
            let shown = paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return match if_no_files {
                IfNoFiles::Error => Err(ArtifactError::NoFiles {
                    name: name.into(),
                    paths: shown,
                }),
                IfNoFiles::Warn => {
                    eprintln!("    warning: artifact `{name}`: no file at {shown}");
                    Ok(0)
                }
                IfNoFiles::Ignore => Ok(0),
            };
        }
        let target = self.path_of(name);
        std::fs::create_dir_all(&target).map_err(|source| ArtifactError::Io {
            name: name.into(),
            path: target.clone(),
            source,
        })?;
        for path in existing {
            let source = if path.is_dir() {
                path.join(".")
            } else {
                path.clone()
            };
            copy(name, &source, &target)?;
        }
        Ok(size_of(&target))
    }

    /// Copies artifact `name`'s files into `into`.
    pub fn download(&self, name: &str, into: &Path) -> Result<u64, ArtifactError> {
        let source = self.path_of(name);
        if !source.is_dir() {
            return Err(ArtifactError::NotUploaded {
                name: name.into(),
                dir: self.dir.clone(),
            });
        }
        std::fs::create_dir_all(into).map_err(|e| ArtifactError::Io {
            name: name.into(),
            path: into.to_path_buf(),
            source: e,
        })?;
        copy(name, &source.join("."), into)?;
        Ok(size_of(&source))
    }
}

fn copy(name: &str, from: &Path, into: &Path) -> Result<(), ArtifactError> {
    run(Command::new("cp").arg("-a").arg(from).arg(into)).map_err(|source| ArtifactError::Copy {
        name: name.into(),
        source,
    })?;
    Ok(())
}

fn size_of(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| size_of(&e.path()))
        .sum()
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn a_file_uploaded_by_one_job_is_downloaded_into_another() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::at(&dir.path().join("artifacts"));
        let file = dir.path().join("job1/nextest-archive.tar.zst");
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, "archive").unwrap();
        assert_eq!(
            store
                .upload("nextest-archive", std::slice::from_ref(&file), IfNoFiles::Error)
                .unwrap(),
            7
        );
        let workspace = dir.path().join("job2");
        store.download("nextest-archive", &workspace).unwrap();
        assert_eq!(
            fs::read_to_string(workspace.join("nextest-archive.tar.zst")).unwrap(),
            "archive"
        );
    }

    #[test]
    fn missing_files_follow_if_no_files_found_and_a_missing_artifact_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::at(dir.path());
        let missing = [dir.path().join("none")];
        let err = store
            .upload("x", &missing, IfNoFiles::Error)
            .unwrap_err()
            .to_string();
        assert!(err.contains("artifact `x`: no file at"), "{err}");
        assert_eq!(store.upload("x", &missing, IfNoFiles::Ignore).unwrap(), 0);
        let err = store.download("never", dir.path()).unwrap_err().to_string();
        assert!(err.contains("`never` was never uploaded"), "{err}");
    }
}
