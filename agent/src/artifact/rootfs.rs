//! The machine rootfs: a verified tarball unpacked to `/var/lib/machines/<slot>` all at once.
//!
//! The tree is unpacked beside its destination and renamed into place, with the tarball's digest
//! in `<rootfs>/etc/unbounded/rootfs.sha256`: a rootfs with the wanted digest is left alone, and
//! a half-unpacked tree is never seen at the destination.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::error::io_err;
use super::install::Staging;
use super::source::Resolved;
use super::tree::{TreeLimits, extract_tree};
use super::{ArtifactError, Fetcher, Installed, expected_sha256, fetch_verified};

/// The digest marker inside the rootfs (relative to it).
pub const MARKER: &str = "etc/unbounded/rootfs.sha256";

/// What is at the rootfs path now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Present {
    Absent,
    /// Unpacked by this agent from a tarball with this digest.
    Ours(String),
    /// A directory without our marker.
    Foreign,
}

/// Looks at `rootfs`.
pub fn present(rootfs: &Path) -> Present {
    if !rootfs.exists() {
        return Present::Absent;
    }
    match fs::read_to_string(rootfs.join(MARKER)) {
        Ok(text) if super::checksum::is_sha256_hex(text.trim()) => Present::Ours(text.trim().to_owned()),
        _ => Present::Foreign,
    }
}

/// Installs the rootfs from `resolved` at `rootfs`, unless the one there has the wanted digest.
/// A different rootfs there is replaced only when `replace` is set (an install this agent
/// recorded as its own); otherwise it is an error and nothing changes.
pub fn install(
    resolved: &Resolved,
    rootfs: &Path,
    replace: bool,
    fetcher: &Fetcher,
) -> Result<(Installed, bool), ArtifactError> {
    let expected = expected_sha256(resolved, fetcher)?;
    let installed = |sha256: String| Installed {
        name: "rootfs".into(),
        path: rootfs.to_path_buf(),
        version: String::new(),
        sha256: sha256.clone(),
        source: resolved.location.to_string(),
        source_sha256: sha256,
        bundle: resolved.bundle.clone(),
    };
    let before = present(rootfs);
    match &before {
        Present::Ours(sha) if *sha == expected => return Ok((installed(expected), false)),
        Present::Absent => {}
        _ if replace => {}
        other => {
            return Err(ArtifactError::InvalidSource {
                field: "MachineImage".into(),
                reason: format!(
                    "{} already exists ({}); refusing to replace a machine this agent did not install",
                    rootfs.display(),
                    match other {
                        Present::Ours(sha) => format!("unpacked from sha256 {sha}"),
                        _ => "no unbounded-agent marker".into(),
                    }
                ),
            });
        }
    }
    let staging = Staging::new(rootfs)?;
    let parent = rootfs.parent().expect("Staging checked the parent");
    let name = rootfs
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    remove_leftovers(parent, &name)?;
    let (download, sha256) = fetch_verified(resolved, &staging, fetcher)?;
    let tree = tempfile::Builder::new()
        .prefix(&format!(".{name}.new-"))
        .tempdir_in(parent)
        .map_err(io_err("create a directory in", parent))?;
    fs::set_permissions(tree.path(), fs::Permissions::from_mode(0o755))
        .map_err(io_err("chmod", tree.path()))?;
    extract_tree(download.path(), tree.path(), TreeLimits::default()).map_err(|reason| {
        ArtifactError::Archive {
            archive: resolved.location.to_string(),
            reason,
        }
    })?;
    drop(download);
    check_marker_dirs(tree.path()).map_err(|reason| ArtifactError::Archive {
        archive: resolved.location.to_string(),
        reason,
    })?;
    let marker = tree.path().join(MARKER);
    crate::files::write_atomic(&marker, format!("{sha256}\n").as_bytes(), 0o644)
        .map_err(io_err("write", &marker))?;
    let old: Option<PathBuf> = match before {
        Present::Absent => None,
        _ => {
            let aside = parent.join(format!(".{name}.old-{}", std::process::id()));
            fs::rename(rootfs, &aside).map_err(io_err("move aside", rootfs))?;
            Some(aside)
        }
    };
    let tree = tree.keep();
    fs::rename(&tree, rootfs).map_err(io_err("rename into place", rootfs))?;
    if let Some(old) = old {
        fs::remove_dir_all(&old).map_err(io_err("remove the replaced rootfs", &old))?;
    }
    Ok((installed(sha256), true))
}

/// Checks that the marker's directories (`etc`, `etc/unbounded`) are absent or real directories
/// of the unpacked tree: a member `etc` that is a symbolic link would send the marker (and every
/// later write below it) out of the rootfs, a file there would leave it no room.
fn check_marker_dirs(tree: &Path) -> Result<(), String> {
    let mut dir = tree.to_path_buf();
    let mut member = PathBuf::new();
    for part in Path::new(MARKER).parent().into_iter().flat_map(Path::components) {
        dir.push(part);
        member.push(part);
        let what = match fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(format!(
                    "cannot inspect member {:?}: {e}",
                    member.display().to_string()
                ));
            }
            Ok(m) if m.is_dir() => continue,
            Ok(m) if m.file_type().is_symlink() => "a symbolic link",
            Ok(_) => "not a directory",
        };
        return Err(format!(
            "member {:?} is {what}; a rootfs needs it to be a directory (the agent writes {MARKER})",
            member.display().to_string()
        ));
    }
    Ok(())
}

/// Removes what an install killed midway left beside the rootfs: `.<name>.new-*` trees,
/// `.<name>.old-*` replaced trees and `.<name>.download-*` files.
fn remove_leftovers(parent: &Path, name: &str) -> Result<(), ArtifactError> {
    let Ok(entries) = fs::read_dir(parent) else {
        return Ok(());
    };
    let prefixes = [".new-", ".old-", ".download-"].map(|p| format!(".{name}{p}"));
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if !prefixes.iter().any(|p| file_name.starts_with(p.as_str())) {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(io_err("remove the leftover", &path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::source::{Expected, Location};
    use crate::artifact::{FetchOptions, checksum};

    fn tarball(dir: &Path) -> PathBuf {
        let src = dir.join("src");
        fs::create_dir_all(src.join("etc")).unwrap();
        fs::write(src.join("etc/os-release"), "ID=debian\n").unwrap();
        let path = dir.join("rootfs.tar.gz");
        let gz = flate2::write::GzEncoder::new(fs::File::create(&path).unwrap(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        b.append_dir_all(".", &src).unwrap();
        b.into_inner().unwrap().finish().unwrap();
        path
    }

    fn resolved(path: &Path, sha: String) -> Resolved {
        Resolved {
            location: Location::File(path.to_path_buf()),
            version: String::new(),
            arch: "amd64".into(),
            expected: Expected::Pinned(sha),
            bundle: None,
        }
    }

    #[test]
    fn the_rootfs_is_unpacked_once_and_left_alone_the_second_time() {
        let dir = tempfile::tempdir().unwrap();
        let archive = tarball(dir.path());
        let sha = checksum::sha256_file(&archive).unwrap();
        let rootfs = dir.path().join("machines/kube1");
        let fetcher = Fetcher::new(FetchOptions::default());
        let (first, changed) = install(&resolved(&archive, sha.clone()), &rootfs, false, &fetcher).unwrap();
        assert!(changed);
        assert_eq!(first.sha256, sha);
        assert_eq!(
            fs::read_to_string(rootfs.join("etc/os-release")).unwrap(),
            "ID=debian\n"
        );
        assert_eq!(present(&rootfs), Present::Ours(sha.clone()));
        let (_, changed) = install(&resolved(&archive, sha), &rootfs, false, &fetcher).unwrap();
        assert!(!changed);
        assert_eq!(fs::read_dir(rootfs.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn leftovers_of_a_killed_install_are_removed_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let archive = tarball(dir.path());
        let sha = checksum::sha256_file(&archive).unwrap();
        let machines = dir.path().join("machines");
        fs::create_dir_all(machines.join(".kube1.new-abc/etc")).unwrap();
        fs::write(machines.join(".kube1.download-xyz"), "partial").unwrap();
        fs::create_dir_all(machines.join(".kube2.new-abc")).unwrap();
        let fetcher = Fetcher::new(FetchOptions::default());
        install(&resolved(&archive, sha), &machines.join("kube1"), false, &fetcher).unwrap();
        let mut left: Vec<String> = fs::read_dir(&machines)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".kube2.new-abc", "kube1"]);
    }

    #[test]
    fn a_tree_whose_etc_leads_elsewhere_is_refused_and_the_marker_stays_inside() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        for (etc, what) in [
            (Some(outside.to_str().unwrap()), "a symbolic link"),
            (None, "not a directory"),
        ] {
            let path = dir.path().join("rootfs.tar.gz");
            let gz =
                flate2::write::GzEncoder::new(fs::File::create(&path).unwrap(), flate2::Compression::fast());
            let mut b = tar::Builder::new(gz);
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_mode(0o777);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(1);
            match etc {
                Some(target) => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_link_name(target).unwrap();
                }
                None => h.set_entry_type(tar::EntryType::Regular),
            }
            b.append_data(&mut h, "etc", &[][..]).unwrap();
            b.into_inner().unwrap().finish().unwrap();
            let sha = checksum::sha256_file(&path).unwrap();
            let rootfs = dir.path().join("machines/kube1");
            let fetcher = Fetcher::new(FetchOptions::default());
            let err = install(&resolved(&path, sha), &rootfs, false, &fetcher).unwrap_err();
            assert!(
                err.to_string().contains(&format!("member \"etc\" is {what}")),
                "{err}"
            );
            assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "{what}");
            assert!(!dir.path().join("machines").exists(), "{what}");
        }
    }

    #[test]
    fn a_foreign_directory_is_not_replaced_and_a_bad_digest_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let archive = tarball(dir.path());
        let sha = checksum::sha256_file(&archive).unwrap();
        let rootfs = dir.path().join("machines/kube1");
        fs::create_dir_all(&rootfs).unwrap();
        let fetcher = Fetcher::new(FetchOptions::default());
        let err = install(&resolved(&archive, sha), &rootfs, false, &fetcher).unwrap_err();
        assert!(err.to_string().contains("did not install"), "{err}");
        let err = install(&resolved(&archive, "0".repeat(64)), &rootfs, true, &fetcher).unwrap_err();
        assert!(matches!(err, ArtifactError::ChecksumMismatch { .. }), "{err}");
        assert_eq!(fs::read_dir(&rootfs).unwrap().count(), 0);
        assert_eq!(fs::read_dir(rootfs.parent().unwrap()).unwrap().count(), 1);
    }
}
