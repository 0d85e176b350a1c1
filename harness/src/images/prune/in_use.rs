//! Which cache entries something on this machine still uses: files a process has open, maps or
//! runs (QEMU's disks, a 9p share, the control plane's binaries), and the backing files of the
//! VMs' qcow2 overlays (`image disk.qcow2 <- vm-state booted.qcow2 <- <vm>.qcow2`).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

/// Cache entries in use, as `(kind, entry name) -> why`.
#[derive(Clone, Debug, Default)]
pub struct InUse {
    roots: Vec<PathBuf>,
    entries: BTreeMap<(String, String), String>,
}

/// A qcow2 chain longer than this is taken as a loop.
const MAX_CHAIN: usize = 16;

impl InUse {
    /// Nothing in use yet, for the cache at `cache_root`.
    pub fn new(cache_root: &Path) -> InUse {
        let mut roots = vec![cache_root.to_path_buf()];
        if let Ok(canonical) = fs::canonicalize(cache_root)
            && canonical != cache_root
        {
            roots.push(canonical);
        }
        InUse {
            roots,
            entries: BTreeMap::new(),
        }
    }

    /// What the processes of this machine use (open files, working directories, executables,
    /// mapped files) and what the qcow2 overlays under `state_root` (`$LAB_STATE_DIR`) are
    /// backed by, directly or through another layer.
    pub fn scan(cache_root: &Path, state_root: &Path) -> InUse {
        let mut in_use = InUse::new(cache_root);
        in_use.add_processes();
        for overlay in qcow2_files_under(state_root, 3) {
            in_use.add_backing_chain(&overlay);
        }
        in_use
    }

    /// Marks the entry holding `path` (if it is inside the cache) as used, for `why`.
    /// Returns whether it was inside the cache.
    pub fn add_path(&mut self, path: &Path, why: impl Into<String>) -> bool {
        let Some((kind, name)) = self.entry_of(path) else {
            return false;
        };
        self.entries.entry((kind, name)).or_insert_with(|| why.into());
        true
    }

    /// Why entry `name` of `kind` is in use, if it is.
    pub fn why(&self, kind: &str, name: &str) -> Option<&str> {
        self.entries
            .get(&(kind.to_string(), name.to_string()))
            .map(String::as_str)
    }

    /// Every entry in use, as `(kind, entry name, why)`.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.entries
            .iter()
            .map(|((kind, name), why)| (kind.as_str(), name.as_str(), why.as_str()))
    }

    /// Marks every cache entry in `qcow2`'s backing chain as used by it.
    pub fn add_backing_chain(&mut self, qcow2: &Path) {
        for backing in backing_chain(qcow2) {
            self.add_path(&backing, format!("backing file of {}", qcow2.display()));
        }
    }

    /// `(kind, entry name)` of a path inside the cache.
    fn entry_of(&self, path: &Path) -> Option<(String, String)> {
        let rest = self.roots.iter().find_map(|root| path.strip_prefix(root).ok())?;
        let mut parts = rest.components().filter_map(|c| match c {
            Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
            _ => None,
        });
        Some((parts.next()?, parts.next()?))
    }

    fn add_processes(&mut self) {
        let Ok(procs) = fs::read_dir("/proc") else {
            return;
        };
        for pid in procs.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
            let proc_dir = PathBuf::from(format!("/proc/{pid}"));
            let comm = fs::read_to_string(proc_dir.join("comm")).unwrap_or_default();
            let who = format!("process {pid} ({})", comm.trim());
            let mut paths: Vec<PathBuf> = ["cwd", "exe"]
                .iter()
                .filter_map(|link| fs::read_link(proc_dir.join(link)).ok())
                .collect();
            if let Ok(fds) = fs::read_dir(proc_dir.join("fd")) {
                paths.extend(fds.filter_map(|fd| fs::read_link(fd.ok()?.path()).ok()));
            }
            if let Ok(maps) = fs::read_to_string(proc_dir.join("maps")) {
                paths.extend(
                    maps.lines()
                        .filter_map(|line| line.find('/').map(|at| PathBuf::from(&line[at..]))),
                );
            }
            for path in paths {
                let text = path.to_string_lossy();
                let path = PathBuf::from(text.strip_suffix(" (deleted)").unwrap_or(&text));
                self.add_path(&path, format!("open by {who}"));
            }
        }
    }
}

/// The backing files of a qcow2 image, nearest first (empty for another format or no backing).
pub fn backing_chain(qcow2: &Path) -> Vec<PathBuf> {
    let mut chain = Vec::new();
    let mut current = qcow2.to_path_buf();
    while chain.len() < MAX_CHAIN {
        match backing_file(&current) {
            Ok(Some(next)) => {
                chain.push(next.clone());
                current = next;
            }
            _ => break,
        }
    }
    chain
}

/// The backing file named in a qcow2 header (relative names are relative to the image's
/// directory); `None` when the file is not qcow2 or has no backing file.
pub fn backing_file(path: &Path) -> std::io::Result<Option<PathBuf>> {
    let mut file = File::open(path)?;
    let mut header = [0u8; 20];
    if file.read_exact(&mut header).is_err() || &header[..4] != b"QFI\xfb" {
        return Ok(None);
    }
    let offset = u64::from_be_bytes(header[8..16].try_into().expect("8 bytes"));
    let size = u32::from_be_bytes(header[16..20].try_into().expect("4 bytes"));
    if offset == 0 || size == 0 || size > 4096 {
        return Ok(None);
    }
    let mut name = vec![0u8; size as usize];
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(&mut name)?;
    let name = PathBuf::from(String::from_utf8_lossy(&name).into_owned());
    Ok(Some(if name.is_absolute() {
        name
    } else {
        path.parent().unwrap_or(Path::new(".")).join(name)
    }))
}

/// The `*.qcow2` files under `dir`, at most `depth` levels down (symlinks not followed).
pub fn qcow2_files_under(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() && depth > 1 {
            found.extend(qcow2_files_under(&path, depth - 1));
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "qcow2") {
            found.push(path);
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_this_process_holds_open_marks_its_entry_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let entry = dir.path().join("host-image/0123456789abcdef");
        fs::create_dir_all(&entry).unwrap();
        let _open = File::create(entry.join("disk.qcow2")).unwrap();
        let in_use = InUse::scan(dir.path(), &dir.path().join("no-state"));
        let why = in_use.why("host-image", "0123456789abcdef").unwrap_or_default();
        assert!(
            why.starts_with(&format!("open by process {}", std::process::id())),
            "expected the entry to be open by this test process, saw {why:?}"
        );
        assert_eq!(
            in_use.entries().count(),
            1,
            "{:?}",
            in_use.entries().collect::<Vec<_>>()
        );
    }

    #[test]
    fn paths_outside_the_cache_are_not_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut in_use = InUse::new(&dir.path().join("cache"));
        assert!(!in_use.add_path(Path::new("/usr/bin/qemu-system-x86_64"), "x"));
        assert!(!in_use.add_path(&dir.path().join("cache"), "the root itself"));
        assert!(in_use.add_path(&dir.path().join("cache/coredns/abc/bin/coredns"), "y"));
        assert_eq!(in_use.why("coredns", "abc"), Some("y"));
    }
}
