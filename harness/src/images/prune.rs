//! `harness images prune`: removes the cache entries the current recipes no longer give.
//!
//! [`plan`] reads the cache and judges every path in it: an entry (`<kind>/<key>/`) is kept when
//! its key is current ([`CurrentKeys::of_recipes`]), when something uses it ([`InUse`]: a
//! process has it open, a VM overlay or a kept entry is backed by it) or when its lock is held
//! (a build or removal in progress); otherwise it is removed with its `<key>.log` and
//! `<key>.lock`. Partial builds (`.tmp-<key>-<pid>/`, `.stale-...`, `.prune-...`) whose lock is
//! free are leftovers of a process that is gone and are removed too. Whatever the cache does not
//! know (another kind, another name) is left alone and reported. [`apply`] removes what the plan
//! says, each entry under its lock.

pub mod current;
pub mod in_use;

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, TryLockError};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::cache::Cache;
use crate::images::{coredns, host, kind_node, kind_tool, kubernetes, oci, rootfs};
use crate::vm::state;
pub use current::{BUNDLE_KIND, CurrentKeys, bundle_key};
pub use in_use::InUse;

/// Every kind of entry the cache holds, in the order `prune` shows them.
pub const KINDS: [&str; 9] = [
    host::KIND,
    rootfs::KIND,
    coredns::KIND,
    kubernetes::KIND,
    oci::KIND,
    kind_tool::KIND,
    kind_node::KIND,
    BUNDLE_KIND,
    state::KIND,
];

/// An error of the prune itself, naming the path.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PruneError + '_ {
    move |source| PruneError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What happens to one path of the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Removed (by [`apply`]), for this reason.
    Remove(String),
    /// A cache entry kept, for this reason.
    Keep(String),
    /// Not something the cache knows: never touched.
    LeftAlone(String),
}

/// One path of the cache and what happens to it.
#[derive(Clone, Debug)]
pub struct Item {
    /// `<kind>/<name>` (`host-image/0123456789abcdef`), or `<name>` for the root's own paths.
    pub name: String,
    pub path: PathBuf,
    /// Disk usage of the path (and of the log and lock going with it).
    pub bytes: u64,
    pub verdict: Verdict,
    /// The lock file held while removing it.
    lock: Option<PathBuf>,
    /// The files removed with it (the entry's log and lock).
    with: Vec<PathBuf>,
}

/// What a prune would do to every path of the cache.
#[derive(Clone, Debug)]
pub struct Plan {
    pub root: PathBuf,
    pub items: Vec<Item>,
    /// Disk space freed by removing every `Remove` item: files hard-linked from kept paths
    /// (the offline bundle links into the other entries) are not counted.
    pub bytes_freed: u64,
}

impl Plan {
    /// The items to remove.
    pub fn removals(&self) -> impl Iterator<Item = &Item> {
        self.items
            .iter()
            .filter(|i| matches!(i.verdict, Verdict::Remove(_)))
    }

    /// The item named `name` (`<kind>/<entry>`).
    pub fn item(&self, name: &str) -> Option<&Item> {
        self.items.iter().find(|i| i.name == name)
    }
}

/// What [`apply`] did.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    /// The names removed.
    pub removed: Vec<String>,
    /// The names skipped because their lock was taken after the plan, with why.
    pub skipped: Vec<(String, String)>,
    /// Disk space freed (as [`Plan::bytes_freed`], for what was removed).
    pub bytes_freed: u64,
}

/// Judges every path of the cache (see the module docs); changes nothing.
pub fn plan(cache: &Cache, current: &CurrentKeys, in_use: &InUse) -> Result<Plan, PruneError> {
    let root = cache.root().to_path_buf();
    let mut items = Vec::new();
    for path in read_dir_sorted(&root)? {
        let name = file_name(&path);
        if !path.is_dir() || path.is_symlink() {
            items.push(left_alone(&path, name, "not a directory of the image cache"));
            continue;
        }
        match current.of(&name) {
            None => items.push(left_alone(
                &path,
                format!("{name}/"),
                &format!("not a kind of the image cache ({})", KINDS.join(", ")),
            )),
            Some(keys) => plan_kind(cache, &name, keys, in_use, &mut items)?,
        }
    }
    keep_backing_files(&root, &mut items);
    let bytes_freed = freed_bytes(&items);
    Ok(Plan {
        root,
        items,
        bytes_freed,
    })
}

/// The paths of one kind directory.
fn plan_kind(
    cache: &Cache,
    kind: &str,
    current: &Result<BTreeSet<String>, String>,
    in_use: &InUse,
    items: &mut Vec<Item>,
) -> Result<(), PruneError> {
    let kind_dir = cache.root().join(kind);
    let mut entries = BTreeSet::new();
    let mut build_files = BTreeSet::new();
    let mut partials = Vec::new();
    for path in read_dir_sorted(&kind_dir)? {
        let name = file_name(&path);
        let is_dir = path.is_dir() && !path.is_symlink();
        let file_key = name
            .strip_suffix(".lock")
            .or_else(|| name.strip_suffix(".log"))
            .filter(|k| is_key(k));
        if is_dir && is_key(&name) {
            entries.insert(name);
        } else if !is_dir && let Some(key) = file_key {
            build_files.insert(key.to_string());
        } else if is_dir && let Some(key) = partial_key(&name) {
            partials.push((path, key));
        } else {
            items.push(left_alone(
                &path,
                format!("{kind}/{name}"),
                "not an entry of the image cache (not <16 hex digits>/, .lock or .log)",
            ));
        }
    }
    let describe_current = |keys: &BTreeSet<String>| match keys.len() {
        0 => "no current entry".to_string(),
        _ => format!("current: {}", keys.iter().cloned().collect::<Vec<_>>().join(", ")),
    };
    for key in entries.union(&build_files) {
        let entry = kind_dir.join(key);
        let lock = cache.lock_path(kind, key);
        let log = cache.log_path(kind, key);
        let has_entry = entries.contains(key);
        let is_current = matches!(current, Ok(keys) if keys.contains(key));
        if is_current && !has_entry {
            continue; // the build files of a current key that is not built (yet): its lock and log stay
        }
        let with: Vec<PathBuf> = [&log, &lock]
            .into_iter()
            .filter(|p| p.exists())
            .cloned()
            .collect();
        let (path, name) = if has_entry {
            (entry.clone(), format!("{kind}/{key}"))
        } else {
            (log.clone(), format!("{kind}/{key}.log (.lock)"))
        };
        let verdict = match current {
            Ok(keys) if keys.contains(key) => Verdict::Keep("current".into()),
            Err(why) => Verdict::Keep(format!("the current key is unknown: {why}")),
            Ok(keys) => {
                if let Some(why) = in_use.why(kind, key) {
                    Verdict::Keep(format!("in use: {why}"))
                } else if is_locked(&lock)? {
                    Verdict::Keep(format!("locked ({}): being built or removed", lock.display()))
                } else if has_entry {
                    Verdict::Remove(format!("not the current key ({})", describe_current(keys)))
                } else {
                    Verdict::Remove(
                        "the log and lock of a build whose entry is gone or never finished".into(),
                    )
                }
            }
        };
        let bytes = std::iter::once(&path)
            .chain(with.iter())
            .map(|p| disk_usage(p))
            .sum();
        let with = with.into_iter().filter(|p| *p != path).collect();
        items.push(Item {
            name,
            path,
            bytes,
            verdict,
            lock: Some(lock),
            with,
        });
    }
    for (path, key) in partials {
        let lock = cache.lock_path(kind, &key);
        let verdict = if is_locked(&lock)? {
            Verdict::Keep(format!("a build in progress: {} is locked", lock.display()))
        } else {
            Verdict::Remove("a partial build or removal left by a process that is gone".into())
        };
        items.push(Item {
            name: format!("{kind}/{}", file_name(&path)),
            bytes: disk_usage(&path),
            path,
            verdict,
            lock: Some(lock),
            with: Vec::new(),
        });
    }
    Ok(())
}

/// Keeps every entry a kept entry's qcow2 image is backed by (a saved VM state's
/// `booted.qcow2` is an overlay of a host image's `disk.qcow2`), until nothing changes.
fn keep_backing_files(root: &Path, items: &mut [Item]) {
    loop {
        let mut in_use = InUse::new(root);
        for item in items.iter().filter(|i| matches!(i.verdict, Verdict::Keep(_))) {
            for qcow2 in in_use::qcow2_files_under(&item.path, 1) {
                in_use.add_backing_chain(&qcow2);
            }
        }
        let mut changed = false;
        for item in items.iter_mut() {
            let Some((kind, name)) = item.name.split_once('/') else {
                continue;
            };
            if let (Verdict::Remove(_), Some(why)) = (&item.verdict, in_use.why(kind, name)) {
                item.verdict = Verdict::Keep(format!("in use: {why}"));
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

/// Removes what `plan` says to remove, each under its lock (an item whose lock is taken since
/// the plan was made is skipped). Stops at the first error, naming the path.
pub fn apply(plan: &Plan) -> Result<Applied, PruneError> {
    let mut applied = Applied::default();
    let mut doomed = Vec::new();
    for item in plan.removals() {
        let lock = match &item.lock {
            Some(path) => match take_lock(path)? {
                Some(file) => Some(file),
                None => {
                    applied.skipped.push((
                        item.name.clone(),
                        format!("{} is locked: being built or removed", path.display()),
                    ));
                    continue;
                }
            },
            None => None,
        };
        doomed.push((item.clone(), lock));
    }
    let items: Vec<Item> = doomed.iter().map(|(item, _)| item.clone()).collect();
    applied.bytes_freed = freed_bytes(&items);
    for (item, _lock) in &doomed {
        remove_path(&item.path)?;
        for file in &item.with {
            remove_path(file)?;
        }
        applied.removed.push(item.name.clone());
    }
    Ok(applied)
}

/// Removes a file or a directory tree; a directory is first renamed to a hidden `.prune-` name
/// in its parent, so that an interrupted removal never leaves a half entry under its key.
fn remove_path(path: &Path) -> Result<(), PruneError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(path)(e)),
    };
    if !meta.is_dir() {
        return fs::remove_file(path).map_err(io_err(path));
    }
    let name = file_name(path);
    let doomed = match partial_key(&name) {
        Some(_) => path.to_path_buf(),
        None => path.with_file_name(format!(".prune-{name}-{}", std::process::id())),
    };
    if doomed != path {
        fs::rename(path, &doomed).map_err(io_err(path))?;
    }
    fs::remove_dir_all(&doomed).map_err(io_err(&doomed))
}

/// Opens and locks `lock` without waiting: `None` when another process holds it.
fn take_lock(lock: &Path) -> Result<Option<File>, PruneError> {
    let file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock)
        .map_err(io_err(lock))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(io_err(lock)(e)),
    }
}

/// Whether another process holds `lock` (a missing lock file is not held); creates nothing.
fn is_locked(lock: &Path) -> Result<bool, PruneError> {
    let file = match File::open(lock) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err(lock)(e)),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(false),
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(e)) => Err(io_err(lock)(e)),
    }
}

/// A cache key: 16 lowercase hex digits ([`RecipeKey::hex`]).
fn is_key(name: &str) -> bool {
    name.len() == 16
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The key of a hidden partial directory: `.tmp-<key>-<pid>` (a build, [`Cache::get_or_build`]),
/// `.stale-<key>-<pid>` (`vm::state::invalidate`), `.prune-<key>-<pid>` (this module).
fn partial_key(name: &str) -> Option<String> {
    let rest = [".tmp-", ".stale-", ".prune-"]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))?;
    let (key, pid) = rest.split_once('-')?;
    (is_key(key) && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())).then(|| key.to_string())
}

fn left_alone(path: &Path, name: String, why: &str) -> Item {
    Item {
        name,
        path: path.to_path_buf(),
        bytes: disk_usage(path),
        verdict: Verdict::LeftAlone(why.to_string()),
        lock: None,
        with: Vec::new(),
    }
}

/// Disk usage of the space that removing every `Remove` item frees: a file (inode) counts when
/// all its links are inside removed items.
fn freed_bytes(items: &[Item]) -> u64 {
    let mut inodes: HashMap<(u64, u64), (u64, u64, u64)> = HashMap::new(); // -> (links seen, nlink, bytes)
    for item in items.iter().filter(|i| matches!(i.verdict, Verdict::Remove(_))) {
        for path in std::iter::once(&item.path).chain(item.with.iter()) {
            visit_files(path, &mut |meta| {
                let seen =
                    inodes
                        .entry((meta.dev(), meta.ino()))
                        .or_insert((0, meta.nlink(), meta.blocks() * 512));
                seen.0 += 1;
            });
        }
    }
    inodes
        .values()
        .filter(|(seen, nlink, _)| seen >= nlink)
        .map(|(_, _, bytes)| bytes)
        .sum()
}

/// Disk usage of a path (each inode once).
fn disk_usage(path: &Path) -> u64 {
    let mut seen = BTreeSet::new();
    let mut bytes = 0;
    visit_files(path, &mut |meta| {
        if seen.insert((meta.dev(), meta.ino())) {
            bytes += meta.blocks() * 512;
        }
    });
    bytes
}

/// Calls `f` with the metadata of `path` and, for a directory, of everything under it
/// (symlinks are not followed).
fn visit_files(path: &Path, f: &mut dyn FnMut(&fs::Metadata)) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return;
    };
    f(&meta);
    if meta.is_dir()
        && let Ok(entries) = fs::read_dir(path)
    {
        for entry in entries.filter_map(|e| e.ok()) {
            visit_files(&entry.path(), f);
        }
    }
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, PruneError> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(io_err(dir))?
        .map(|e| e.map(|e| e.path()).map_err(io_err(dir)))
        .collect::<Result<_, _>>()?;
    paths.sort();
    Ok(paths)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::RecipeKey;

    #[test]
    fn partial_directories_name_their_key() {
        assert_eq!(
            partial_key(".tmp-0123456789abcdef-42").as_deref(),
            Some("0123456789abcdef")
        );
        assert_eq!(
            partial_key(".stale-0123456789abcdef-7").as_deref(),
            Some("0123456789abcdef")
        );
        assert_eq!(
            partial_key(".prune-0123456789abcdef-7").as_deref(),
            Some("0123456789abcdef")
        );
        assert_eq!(partial_key(".tmp-0123456789abcdef-"), None);
        assert_eq!(partial_key(".tmp-0123456789ABCDEF-1"), None);
        assert_eq!(partial_key(".cache-0123456789abcdef-1"), None);
        assert!(is_key(&RecipeKey::new("x").hex()));
        assert!(!is_key("bin"));
    }
}
