//! The room a rehearsal needs, checked before it starts: every job's build directory, the lab's
//! images, its joined-node checkpoints and VM disks live on the store's filesystem, and a disk
//! that fills in the middle of a test job fails it for a reason the workflow does not have.

use std::io;
use std::path::Path;

/// One GiB.
pub const GIB: u64 = 1024 * 1024 * 1024;

/// What a whole rehearsal held at its peak on the project's machine, with margin: the archive
/// job's build directory and Go caches beside the lab's images, or a test job's lab cache,
/// archive, checkpoints and VM disks (docs/ci.md, "Rehearsing PR CI").
pub const NEEDED_GIB: u64 = 40;

/// Too little room where the rehearsal keeps its store.
#[derive(Debug, thiserror::Error)]
#[error(
    "only {free_gib:.1} GiB free on the filesystem of {path} (a rehearsal needs about {needed_gib} GiB: \
     every job's build directory, the lab's images, checkpoints and VM disks live there); free some \
     space (e.g. an unused CARGO_TARGET_DIR) or pass --min-free-gib"
)]
pub struct NotEnoughRoom {
    pub path: String,
    pub free_gib: f64,
    pub needed_gib: u64,
}

/// The bytes an unprivileged process may still write on the filesystem holding `path` (its
/// nearest existing ancestor when it does not exist yet).
pub fn available_bytes(path: &Path) -> io::Result<u64> {
    let existing = path
        .ancestors()
        .find(|p| p.exists())
        .ok_or_else(|| io::Error::other(format!("no part of {} exists", path.display())))?;
    let stats = rustix::fs::statvfs(existing).map_err(io::Error::from)?;
    Ok(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// Fails naming the free and the needed room when `path`'s filesystem has less than
/// `needed_gib` GiB available.
pub fn ensure_room(path: &Path, needed_gib: u64) -> Result<(), NotEnoughRoom> {
    let free = available_bytes(path).unwrap_or(u64::MAX);
    if free >= needed_gib.saturating_mul(GIB) {
        return Ok(());
    }
    Err(NotEnoughRoom {
        path: path.display().to_string(),
        free_gib: free as f64 / GIB as f64,
        needed_gib,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_room_of_a_path_not_made_yet_is_its_filesystems() {
        let dir = tempfile::tempdir().unwrap();
        let here = available_bytes(dir.path()).unwrap();
        let below = available_bytes(&dir.path().join("not/made/yet")).unwrap();
        assert!(here > 0);
        // The same filesystem; other writers may move it a little between the two reads.
        assert!(here.abs_diff(below) < 256 * 1024 * 1024, "{here} vs {below}");
    }

    #[test]
    fn more_than_the_disk_holds_is_refused_naming_both_figures_and_nothing_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let err = ensure_room(dir.path(), u64::MAX / GIB).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("GiB free on the filesystem of"), "{text}");
        assert!(text.contains(&format!("about {} GiB", u64::MAX / GIB)), "{text}");
        assert!(text.contains("--min-free-gib"), "{text}");
        assert!(ensure_room(dir.path(), 0).is_ok());
    }
}
