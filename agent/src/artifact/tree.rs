//! Unpacking a whole tree from a gzip tarball (the machine rootfs) without letting a hostile
//! archive write outside it: absolute names, `..`, device nodes, FIFOs and hard links leaving
//! the tree are refused, and writes never follow a symbolic link out of the destination
//! (the `tar` crate checks each parent against the destination). Sizes are bounded.

use std::fs::File;
use std::path::{Component, Path};

use flate2::read::GzDecoder;
use tar::EntryType;

/// Limits of one tree.
#[derive(Clone, Copy, Debug)]
pub struct TreeLimits {
    /// Sum of all members' sizes.
    pub max_total_bytes: u64,
    pub max_entries: u64,
}

impl Default for TreeLimits {
    fn default() -> Self {
        TreeLimits {
            max_total_bytes: 16 * 1024 * 1024 * 1024,
            max_entries: 1_000_000,
        }
    }
}

/// What was unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeSummary {
    pub entries: u64,
    pub bytes: u64,
}

/// Unpacks `archive` into the existing directory `dest`, preserving modes and ownership.
/// The error says which member was refused and why.
pub fn extract_tree(archive: &Path, dest: &Path, limits: TreeLimits) -> Result<TreeSummary, String> {
    let file = File::open(archive).map_err(|e| format!("cannot open it: {e}"))?;
    let mut tar = tar::Archive::new(GzDecoder::new(file));
    tar.set_preserve_permissions(true);
    tar.set_preserve_ownerships(true);
    tar.set_preserve_mtime(true);
    tar.set_unpack_xattrs(false);
    tar.set_overwrite(true);
    let entries = tar
        .entries()
        .map_err(|e| format!("not a gzip-compressed tar archive: {e}"))?;
    let mut summary = TreeSummary { entries: 0, bytes: 0 };
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("not a readable gzip-compressed tar archive: {e}"))?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        check_member_name(&name)?;
        let kind = entry.header().entry_type();
        check_member_type(&name, kind)?;
        if kind == EntryType::Link {
            let target = entry
                .link_name_bytes()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            check_member_name(&target).map_err(|e| format!("hard link {name:?} points outside: {e}"))?;
        }
        summary.entries += 1;
        summary.bytes += entry.header().size().unwrap_or(0);
        if summary.entries > limits.max_entries {
            return Err(format!("more than {} members", limits.max_entries));
        }
        if summary.bytes > limits.max_total_bytes {
            return Err(format!("more than {} bytes unpacked", limits.max_total_bytes));
        }
        entry.unpack_in(dest).map_err(|e| {
            format!(
                "member {name:?} could not be unpacked: {}",
                crate::error_chain::chain(&e)
            )
        })?;
    }
    if summary.entries == 0 {
        return Err("it holds no member".into());
    }
    Ok(summary)
}

fn check_member_name(name: &str) -> Result<(), String> {
    if name.starts_with('/') {
        return Err(format!("member {name:?} is an absolute path"));
    }
    if Path::new(name).components().any(|c| c == Component::ParentDir) {
        return Err(format!("member {name:?} climbs out of the archive (\"..\")"));
    }
    Ok(())
}

fn check_member_type(name: &str, kind: EntryType) -> Result<(), String> {
    let what = match kind {
        EntryType::Regular
        | EntryType::Continuous
        | EntryType::Directory
        | EntryType::Symlink
        | EntryType::Link
        | EntryType::GNULongName
        | EntryType::GNULongLink
        | EntryType::XHeader
        | EntryType::XGlobalHeader => return Ok(()),
        EntryType::Char => "a character device",
        EntryType::Block => "a block device",
        EntryType::Fifo => "a FIFO",
        _ => "of an unsupported type",
    };
    Err(format!(
        "member {name:?} is {what} (nspawn provides /dev; a rootfs holds none)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;

    fn header(name: &str, kind: EntryType, size: u64, link: Option<&str>) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(if kind == EntryType::Directory {
            0o755
        } else {
            0o644
        });
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        let field = &mut h.as_old_mut().name;
        field.fill(0);
        field[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(link) = link {
            h.set_link_name(link).unwrap();
        }
        h.set_cksum();
        h
    }

    fn tarball(dir: &Path, members: &[(&str, EntryType, &[u8], Option<&str>)]) -> std::path::PathBuf {
        let path = dir.join("rootfs.tar.gz");
        let mut b = tar::Builder::new(GzEncoder::new(File::create(&path).unwrap(), Compression::fast()));
        for (name, kind, data, link) in members {
            b.append(&header(name, *kind, data.len() as u64, *link), *data)
                .unwrap();
        }
        b.into_inner().unwrap().finish().unwrap();
        path
    }

    #[test]
    fn a_tree_with_directories_files_and_links_is_unpacked() {
        let dir = tempfile::tempdir().unwrap();
        let archive = tarball(
            dir.path(),
            &[
                ("./etc/", EntryType::Directory, b"", None),
                ("./etc/os-release", EntryType::Regular, b"ID=debian\n", None),
                (
                    "./etc/alias",
                    EntryType::Symlink,
                    b"",
                    Some("/usr/lib/os-release"),
                ),
                ("./etc/hard", EntryType::Link, b"", Some("./etc/os-release")),
            ],
        );
        let dest = dir.path().join("root");
        std::fs::create_dir(&dest).unwrap();
        let summary = extract_tree(&archive, &dest, TreeLimits::default()).unwrap();
        assert_eq!(summary.entries, 4);
        assert_eq!(
            std::fs::read_to_string(dest.join("etc/hard")).unwrap(),
            "ID=debian\n"
        );
        assert_eq!(
            std::fs::read_link(dest.join("etc/alias")).unwrap(),
            Path::new("/usr/lib/os-release")
        );
    }

    #[test]
    fn hostile_members_are_refused_naming_the_member() {
        let cases: [(&str, EntryType, Option<&str>, &str); 5] = [
            ("../evil", EntryType::Regular, None, "climbs out"),
            ("/etc/evil", EntryType::Regular, None, "absolute path"),
            ("./dev/sda", EntryType::Block, None, "block device"),
            ("./dev/null", EntryType::Char, None, "character device"),
            (
                "./etc/hard",
                EntryType::Link,
                Some("../../etc/shadow"),
                "points outside",
            ),
        ];
        for (name, kind, link, why) in cases {
            let dir = tempfile::tempdir().unwrap();
            let archive = tarball(dir.path(), &[(name, kind, b"", link)]);
            let dest = dir.path().join("root");
            std::fs::create_dir(&dest).unwrap();
            let err = extract_tree(&archive, &dest, TreeLimits::default()).unwrap_err();
            assert!(err.contains(why) && err.contains(name), "{name}: {err}");
        }
    }

    #[test]
    fn a_write_through_a_symlink_out_of_the_tree_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let archive = tarball(
            dir.path(),
            &[
                (
                    "./etc",
                    EntryType::Symlink,
                    b"",
                    Some(outside.path().to_str().unwrap()),
                ),
                ("./etc/passwd", EntryType::Regular, b"x", None),
            ],
        );
        let dest = dir.path().join("root");
        std::fs::create_dir(&dest).unwrap();
        assert!(extract_tree(&archive, &dest, TreeLimits::default()).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn oversize_trees_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let archive = tarball(dir.path(), &[("./big", EntryType::Regular, &[0u8; 100], None)]);
        let dest = dir.path().join("root");
        std::fs::create_dir(&dest).unwrap();
        let limits = TreeLimits {
            max_total_bytes: 10,
            max_entries: 10,
        };
        assert!(
            extract_tree(&archive, &dest, limits)
                .unwrap_err()
                .contains("more than 10 bytes")
        );
    }
}
