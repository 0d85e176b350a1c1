//! The one cache of images and artifacts, outside the repository.
//!
//! Entries live at `<root>/<kind>/<key>/`, where `root` is `$LAB_CACHE_DIR`,
//! else `$XDG_CACHE_HOME/unbounded-lab`, else `~/.cache/unbounded-lab`, and
//! `key` is a hash of the recipe and its pinned inputs ([`RecipeKey`]). An
//! entry is built once, under an exclusive file lock, into a temporary
//! directory that is renamed into place only when the build succeeded, so a
//! half-built entry is never seen and parallel tests build it once.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// A build's own error, whatever its type (the cache only carries it).
pub type BuildError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of the cache itself (a failing build's own error is carried inside).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cache directory {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("neither LAB_CACHE_DIR, XDG_CACHE_HOME nor HOME is set: cannot place the lab cache")]
    NoHome,
    #[error("building {kind} {key} failed (log: {log})")]
    Build {
        kind: String,
        key: String,
        log: PathBuf,
        #[source]
        source: BuildError,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CacheError + '_ {
    move |source| CacheError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A hash of everything a recipe's output depends on: its script, its pinned
/// versions, the files it reads. Changing any input yields a new key.
#[derive(Clone, Debug, Default)]
pub struct RecipeKey {
    hasher: Sha256,
}

impl RecipeKey {
    pub fn new(recipe_name: &str) -> Self {
        RecipeKey::default().with("recipe", recipe_name)
    }

    /// Adds a named input (name and value are both hashed, length-prefixed).
    pub fn with(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        for part in [name.as_bytes(), value.as_ref()] {
            self.hasher.update((part.len() as u64).to_le_bytes());
            self.hasher.update(part);
        }
        self
    }

    /// Adds a file's contents under its path as name.
    pub fn with_file(self, path: &Path) -> Result<Self, CacheError> {
        let bytes = fs::read(path).map_err(io_err(path))?;
        Ok(self.with(&path.to_string_lossy(), bytes))
    }

    /// The key: the first 16 hex digits of the hash.
    pub fn hex(&self) -> String {
        hex::encode(self.hasher.clone().finalize())[..16].to_string()
    }
}

/// The cache root and its entries.
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
}

/// One cached entry, as `harness images list` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CacheEntry {
    pub kind: String,
    pub key: String,
    pub path: PathBuf,
    pub bytes: u64,
}

impl Cache {
    /// The cache at its configured location (see module docs), created if missing.
    pub fn open() -> Result<Cache, CacheError> {
        Cache::at(configured_root()?)
    }

    /// A cache rooted at `root` (tests use a temporary directory).
    pub fn at(root: PathBuf) -> Result<Cache, CacheError> {
        fs::create_dir_all(&root).map_err(io_err(&root))?;
        Ok(Cache { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory an entry has (or would have) once built.
    pub fn entry_path(&self, kind: &str, key: &RecipeKey) -> PathBuf {
        self.root.join(kind).join(key.hex())
    }

    /// The entry's directory if it has been built, else `None`.
    pub fn lookup(&self, kind: &str, key: &RecipeKey) -> Option<PathBuf> {
        let path = self.entry_path(kind, key);
        path.is_dir().then_some(path)
    }

    /// The lock file every build (and removal) of entry `key` (hex) of `kind` holds.
    pub fn lock_path(&self, kind: &str, key: &str) -> PathBuf {
        self.root.join(kind).join(format!("{key}.lock"))
    }

    /// The build log of entry `key` (hex) of `kind`.
    pub fn log_path(&self, kind: &str, key: &str) -> PathBuf {
        self.root.join(kind).join(format!("{key}.log"))
    }

    /// Returns the entry's directory, building it first if it is missing.
    ///
    /// `build` receives an empty temporary directory to fill and the path of
    /// a log file to send the build's output to. Only one process builds a
    /// given entry at a time; the others wait for the lock and then find it.
    pub fn get_or_build(
        &self,
        kind: &str,
        key: &RecipeKey,
        build: impl FnOnce(&Path, &Path) -> Result<(), BuildError>,
    ) -> Result<PathBuf, CacheError> {
        let final_path = self.entry_path(kind, key);
        if final_path.is_dir() {
            return Ok(final_path);
        }
        let kind_dir = self.root.join(kind);
        fs::create_dir_all(&kind_dir).map_err(io_err(&kind_dir))?;
        let lock_path = self.lock_path(kind, &key.hex());
        let lock = File::create(&lock_path).map_err(io_err(&lock_path))?;
        if lock.try_lock().is_err() {
            eprintln!("waiting for another process building {kind} {} ...", key.hex());
            lock.lock().map_err(io_err(&lock_path))?;
        }
        if final_path.is_dir() {
            return Ok(final_path);
        }
        let tmp = kind_dir.join(format!(".tmp-{}-{}", key.hex(), std::process::id()));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
        }
        fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
        let log = self.log_path(kind, &key.hex());
        match build(&tmp, &log) {
            Ok(()) => {
                fs::rename(&tmp, &final_path).map_err(io_err(&final_path))?;
                Ok(final_path)
            }
            Err(source) => {
                let _ = fs::remove_dir_all(&tmp);
                Err(CacheError::Build {
                    kind: kind.to_string(),
                    key: key.hex(),
                    log,
                    source,
                })
            }
        }
    }

    /// Every built entry, sorted by kind and key.
    pub fn list(&self) -> Result<Vec<CacheEntry>, CacheError> {
        let mut entries = Vec::new();
        for kind in read_dir_sorted(&self.root)? {
            if !kind.is_dir() {
                continue;
            }
            for entry in read_dir_sorted(&kind)? {
                let name = entry
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                if !entry.is_dir() || name.starts_with('.') {
                    continue;
                }
                entries.push(CacheEntry {
                    kind: kind
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned(),
                    key: name,
                    bytes: dir_size(&entry),
                    path: entry,
                });
            }
        }
        Ok(entries)
    }
}

/// Where the lab cache is: `$LAB_CACHE_DIR`, else `$XDG_CACHE_HOME/unbounded-lab`, else
/// `~/.cache/unbounded-lab`.
pub fn configured_root() -> Result<PathBuf, CacheError> {
    if let Some(dir) = std::env::var_os("LAB_CACHE_DIR").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir).join("unbounded-lab"));
    }
    let home = std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .ok_or(CacheError::NoHome)?;
    Ok(PathBuf::from(home).join(".cache").join("unbounded-lab"))
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, CacheError> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    Ok(paths)
}

fn dir_size(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    fs::read_dir(path)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| dir_size(&e.path())).sum())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_any_input() {
        let a = RecipeKey::new("r").with("version", "1");
        let b = RecipeKey::new("r").with("version", "2");
        let c = RecipeKey::new("r").with("versio", "n1");
        assert_ne!(a.hex(), b.hex());
        assert_ne!(a.hex(), c.hex());
        assert_eq!(a.hex(), RecipeKey::new("r").with("version", "1").hex());
    }

    #[test]
    fn entry_is_built_once_and_failed_builds_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path().to_path_buf()).unwrap();
        let key = RecipeKey::new("t");
        let err = cache
            .get_or_build("thing", &key, |_, _| Err("boom".into()))
            .unwrap_err();
        assert!(err.to_string().contains("building thing"), "{err}");
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("boom"));
        assert!(cache.lookup("thing", &key).is_none());

        let mut builds = 0;
        for _ in 0..2 {
            cache
                .get_or_build("thing", &key, |out, _| {
                    builds += 1;
                    fs::write(out.join("file"), "x")?;
                    Ok(())
                })
                .unwrap();
        }
        assert_eq!(builds, 1);
        let listed = cache.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].kind, "thing");
        assert_eq!(listed[0].bytes, 1);
    }
}
