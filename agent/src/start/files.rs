//! Writing the node's files below a root: only what differs is rewritten (a second `start` leaves
//! every file, inode and mtime as it was), atomically and with its mode.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::files::{link_atomic, under, write_atomic};
use crate::render::{Rendered, RenderedFile, RenderedLink, WriteError};

/// Writes the files of `rendered` accepted by `keep` that differ from what is on disk; returns
/// the host paths written.
pub fn write_changed(
    root: &Path,
    rendered: &Rendered,
    keep: impl Fn(&Path) -> bool,
) -> Result<Vec<PathBuf>, WriteError> {
    let mut changed = Vec::new();
    for f in rendered.files.iter().filter(|f| keep(&f.path)) {
        let path = under(root, &f.path);
        if !same_file(&path, f) {
            write_atomic(&path, &f.contents, f.mode).map_err(|source| WriteError {
                path: path.clone(),
                source,
            })?;
            changed.push(f.path.clone());
        }
    }
    for l in rendered.links.iter().filter(|l| keep(&l.path)) {
        let path = under(root, &l.path);
        if !same_link(&path, l) {
            link_atomic(&path, &l.target).map_err(|source| WriteError {
                path: path.clone(),
                source,
            })?;
            changed.push(l.path.clone());
        }
    }
    Ok(changed)
}

fn same_file(path: &Path, f: &RenderedFile) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    meta.is_file()
        && meta.permissions().mode() & 0o7777 == f.mode
        && std::fs::read(path).is_ok_and(|c| c == f.contents)
}

fn same_link(path: &Path, l: &RenderedLink) -> bool {
    std::fs::read_link(path).is_ok_and(|t| t == l.target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::Place;

    #[test]
    fn an_unchanged_file_is_not_rewritten() {
        let root = tempfile::tempdir().unwrap();
        let rendered = Rendered {
            files: vec![RenderedFile {
                path: "/etc/x.conf".into(),
                local_path: "/etc/x.conf".into(),
                place: Place::Host,
                mode: 0o600,
                contents: b"a\n".to_vec(),
            }],
            links: vec![RenderedLink {
                path: "/etc/l".into(),
                local_path: "/etc/l".into(),
                place: Place::Host,
                target: "/dev/null".into(),
            }],
        };
        assert_eq!(write_changed(root.path(), &rendered, |_| true).unwrap().len(), 2);
        let file = root.path().join("etc/x.conf");
        let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&file).unwrap());
        assert!(
            write_changed(root.path(), &rendered, |_| true)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&file).unwrap()),
            inode
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            write_changed(root.path(), &rendered, |_| true).unwrap(),
            [PathBuf::from("/etc/x.conf")]
        );
    }
}
