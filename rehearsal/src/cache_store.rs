//! A local stand-in for GitHub's cache service: entries saved and restored by the workflow's own
//! keys and restore-keys, as zstd tarballs of absolute paths, with GitHub's rules — an existing
//! key is never overwritten, a restore-key matches the newest entry it prefixes, and beyond the
//! repository's limit the least recently used entries are evicted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use agent::exec::{CommandFailed, run};
use sha2::{Digest, Sha256};

/// GitHub's cache limit per repository.
pub const GITHUB_LIMIT_BYTES: u64 = 10 * 1024 * 1024 * 1024;

/// Why a cache could not be saved or restored.
#[derive(Debug, thiserror::Error)]
pub enum CacheStoreError {
    #[error("cache store {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cache `{key}`: {source}")]
    Tar {
        key: String,
        #[source]
        source: CommandFailed,
    },
}

/// What a restore found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restored {
    /// The key itself (`cache-hit` is true; nothing is saved at the end of the job).
    Exact {
        key: String,
        bytes: u64,
    },
    /// An entry a restore-key prefixes (saved again under the key at the end of the job).
    Partial {
        key: String,
        bytes: u64,
    },
    Miss,
}

/// One entry's record beside its tarball.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct EntryInfo {
    pub key: String,
    pub bytes: u64,
    pub created: u64,
    pub last_used: u64,
}

/// The store: `<root>/<sha256 of key>.tar.zst` and `.json`.
#[derive(Clone, Debug)]
pub struct CacheStore {
    root: PathBuf,
    limit_bytes: u64,
}

impl CacheStore {
    /// The store at `root` (created), evicting beyond `limit_bytes`.
    pub fn open(root: &Path, limit_bytes: u64) -> Result<CacheStore, CacheStoreError> {
        std::fs::create_dir_all(root).map_err(io(root))?;
        Ok(CacheStore {
            root: root.to_path_buf(),
            limit_bytes,
        })
    }

    fn paths_of(&self, key: &str) -> (PathBuf, PathBuf) {
        let name = hex::encode(Sha256::digest(key.as_bytes()));
        (
            self.root.join(format!("{name}.tar.zst")),
            self.root.join(format!("{name}.json")),
        )
    }

    /// Every entry, oldest first.
    pub fn entries(&self) -> Vec<EntryInfo> {
        let mut entries: Vec<EntryInfo> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter_map(|p| serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok())
            .collect();
        entries.sort_by_key(|e| (e.created, e.key.clone()));
        entries
    }

    /// The bytes the store holds.
    pub fn total_bytes(&self) -> u64 {
        self.entries().iter().map(|e| e.bytes).sum()
    }

    /// Restores `key`, else the newest entry the first matching restore-key prefixes, unpacking
    /// its paths where they were saved from.
    pub fn restore(&self, key: &str, restore_keys: &[String]) -> Result<Restored, CacheStoreError> {
        let entries = self.entries();
        let found = entries
            .iter()
            .find(|e| e.key == key)
            .map(|e| (e, true))
            .or_else(|| {
                restore_keys.iter().find_map(|prefix| {
                    entries
                        .iter()
                        .filter(|e| e.key.starts_with(prefix.as_str()))
                        .max_by_key(|e| e.created)
                        .map(|e| (e, false))
                })
            });
        let Some((entry, exact)) = found else {
            return Ok(Restored::Miss);
        };
        let (tarball, record) = self.paths_of(&entry.key);
        let mut tar = Command::new("tar");
        tar.args(["--posix", "-P", "--zstd", "-xf"]).arg(&tarball);
        run(&mut tar).map_err(|source| CacheStoreError::Tar {
            key: entry.key.clone(),
            source,
        })?;
        let mut used = entry.clone();
        used.last_used = now();
        write_record(&record, &used)?;
        let (key, bytes) = (entry.key.clone(), entry.bytes);
        Ok(if exact {
            Restored::Exact { key, bytes }
        } else {
            Restored::Partial { key, bytes }
        })
    }

    /// Saves `paths` (those that exist) under `key`. `None` when the key is already there (GitHub
    /// never overwrites an entry) or no path exists; else the entry's size. Then evicts the least
    /// recently used entries beyond the limit, returning their keys beside.
    pub fn save(
        &self,
        key: &str,
        paths: &[PathBuf],
    ) -> Result<(Option<u64>, Vec<EntryInfo>), CacheStoreError> {
        let (tarball, record) = self.paths_of(key);
        let existing: Vec<&PathBuf> = paths.iter().filter(|p| p.exists()).collect();
        if record.exists() || existing.is_empty() {
            return Ok((None, Vec::new()));
        }
        let partial = tarball.with_extension("partial");
        let mut tar = Command::new("tar");
        tar.args(["--posix", "-P", "--zstd", "-cf"])
            .arg(&partial)
            .arg("--")
            .args(&existing);
        run(&mut tar).map_err(|source| CacheStoreError::Tar {
            key: key.to_string(),
            source,
        })?;
        std::fs::rename(&partial, &tarball).map_err(io(&tarball))?;
        let bytes = std::fs::metadata(&tarball).map_err(io(&tarball))?.len();
        let info = EntryInfo {
            key: key.to_string(),
            bytes,
            created: now(),
            last_used: now(),
        };
        write_record(&record, &info)?;
        Ok((Some(bytes), self.evict_beyond_limit()?))
    }

    /// Removes least recently used entries until the store fits its limit.
    fn evict_beyond_limit(&self) -> Result<Vec<EntryInfo>, CacheStoreError> {
        let mut entries = self.entries();
        entries.sort_by_key(|e| (e.last_used, e.created));
        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        let mut evicted = Vec::new();
        for entry in entries {
            if total <= self.limit_bytes {
                break;
            }
            let (tarball, record) = self.paths_of(&entry.key);
            std::fs::remove_file(&tarball).map_err(io(&tarball))?;
            std::fs::remove_file(&record).map_err(io(&record))?;
            total -= entry.bytes;
            evicted.push(entry);
        }
        Ok(evicted)
    }
}

fn write_record(path: &Path, info: &EntryInfo) -> Result<(), CacheStoreError> {
    let text = serde_json::to_string_pretty(info).expect("an entry record serialises");
    std::fs::write(path, text + "\n").map_err(io(path))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CacheStoreError + '_ {
    move |source| CacheStoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Bytes as GiB/MiB for people.
pub fn human(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = bytes as f64 / MIB;
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else {
        format!("{mib:.1} MiB")
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn a_saved_path_comes_back_by_key_or_restore_key_and_a_key_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let store = CacheStore::open(&dir.path().join("store"), GITHUB_LIMIT_BYTES).unwrap();
        let data = dir.path().join("home/.cargo/registry");
        fs::create_dir_all(&data).unwrap();
        fs::write(data.join("crate"), "v1").unwrap();
        let (saved, evicted) = store
            .save("cargo-Linux-lint-aaa", std::slice::from_ref(&data))
            .unwrap();
        assert!(saved.unwrap() > 0 && evicted.is_empty());
        fs::write(data.join("crate"), "v2").unwrap();
        assert_eq!(
            store
                .save("cargo-Linux-lint-aaa", std::slice::from_ref(&data))
                .unwrap()
                .0,
            None
        );

        fs::remove_dir_all(dir.path().join("home")).unwrap();
        let restored = store
            .restore("cargo-Linux-lint-bbb", &["cargo-Linux-lint-".into()])
            .unwrap();
        assert!(
            matches!(restored, Restored::Partial { ref key, .. } if key == "cargo-Linux-lint-aaa"),
            "{restored:?}"
        );
        assert_eq!(fs::read_to_string(data.join("crate")).unwrap(), "v1");
        assert!(matches!(
            store.restore("cargo-Linux-lint-aaa", &[]).unwrap(),
            Restored::Exact { .. }
        ));
        assert_eq!(
            store.restore("go-Linux-x", &["go-Linux-".into()]).unwrap(),
            Restored::Miss
        );
    }

    #[test]
    fn beyond_the_limit_the_least_recently_used_entry_goes() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        fs::create_dir_all(&data).unwrap();
        fs::write(data.join("f"), vec![7u8; 10_000]).unwrap();
        let probe = CacheStore::open(&dir.path().join("probe"), GITHUB_LIMIT_BYTES).unwrap();
        let one = probe.save("one", std::slice::from_ref(&data)).unwrap().0.unwrap();
        let store = CacheStore::open(&dir.path().join("store"), one * 2 + one / 2).unwrap();
        store.save("a", std::slice::from_ref(&data)).unwrap();
        store.save("b", std::slice::from_ref(&data)).unwrap();
        store.restore("a", &[]).unwrap();
        let (_, evicted) = store.save("c", std::slice::from_ref(&data)).unwrap();
        let evicted: Vec<&str> = evicted.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(evicted, ["b"]);
        let kept: Vec<String> = store.entries().into_iter().map(|e| e.key).collect();
        assert_eq!(kept, ["a", "c"]);
    }

    #[test]
    fn nothing_to_save_saves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = CacheStore::open(dir.path(), GITHUB_LIMIT_BYTES).unwrap();
        assert_eq!(store.save("k", &[dir.path().join("missing")]).unwrap().0, None);
        assert!(store.entries().is_empty());
    }
}
