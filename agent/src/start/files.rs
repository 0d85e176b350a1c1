//! Writing the node's files below a root: only what differs is rewritten (a second `start` leaves
//! every file, inode and mtime as it was), atomically and with its mode; a machine's files beneath
//! its root (`render::write::destination`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::files::{link_atomic, write_atomic};
use crate::render::write::destination;
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
        let to = destination(root, &f.path, &f.local_path, f.place)?;
        if !same_file(&to.path, f) {
            write_atomic(&to.path, &f.contents, f.mode).map_err(|source| WriteError {
                path: to.shown.clone(),
                source,
            })?;
            changed.push(f.path.clone());
        }
    }
    for l in rendered.links.iter().filter(|l| keep(&l.path)) {
        let to = destination(root, &l.path, &l.local_path, l.place)?;
        if !same_link(&to.path, l) {
            link_atomic(&to.path, &l.target).map_err(|source| WriteError {
                path: to.shown.clone(),
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

    fn machine_file(local: &str) -> RenderedFile {
        RenderedFile {
            path: Path::new("/var/lib/machines/kube1").join(local.trim_start_matches('/')),
            local_path: local.into(),
            place: Place::Machine,
            mode: 0o644,
            contents: b"[Unit]\n".to_vec(),
        }
    }

    /// Every file of the host's stand-in tree (below `root`, outside the machine), with its bytes.
    fn host_tree(root: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
        walkdir(root)
            .into_iter()
            .filter(|p| !p.starts_with(root.join("var/lib/machines")))
            .map(|p| {
                let bytes = std::fs::read(&p).ok();
                (p, bytes)
            })
            .collect()
    }

    fn walkdir(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.symlink_metadata().unwrap().is_dir() {
                out.extend(walkdir(&path));
            }
            out.push(path);
        }
        out.sort();
        out
    }

    /// A hostile machine rootfs (`etc/systemd -> /etc/systemd` of the host, `var/lib -> /`):
    /// writing the machine's units or kubelet's files there is refused, naming the path and the
    /// link, and the host's tree is as before.
    #[test]
    fn a_rootfs_whose_links_lead_out_is_refused_and_the_host_unchanged() {
        let root = tempfile::tempdir().unwrap();
        let machine = root.path().join("var/lib/machines/kube1");
        std::fs::create_dir_all(machine.join("etc")).unwrap();
        std::fs::create_dir_all(machine.join("var")).unwrap();
        std::fs::create_dir_all(root.path().join("etc/systemd/system")).unwrap();
        std::fs::write(root.path().join("etc/systemd/system/host.service"), "host\n").unwrap();
        std::os::unix::fs::symlink(root.path().join("etc/systemd"), machine.join("etc/systemd")).unwrap();
        std::os::unix::fs::symlink("/", machine.join("var/lib")).unwrap();
        let before = host_tree(root.path());
        for (local, link) in [
            ("/etc/systemd/system/kubelet.service", "etc/systemd"),
            ("/var/lib/kubelet/config.yaml", "var/lib"),
        ] {
            let rendered = Rendered {
                files: vec![machine_file(local)],
                links: Vec::new(),
            };
            let err = write_changed(root.path(), &rendered, |_| true)
                .unwrap_err()
                .to_string();
            let expected = format!(
                "cannot write {}: {}: a symbolic link on the way leads out of {}",
                machine.join(local.trim_start_matches('/')).display(),
                machine.join(link).display(),
                machine.display()
            );
            assert!(err.starts_with(&expected), "{err}\nwanted: {expected}");
        }
        assert_eq!(host_tree(root.path()), before);
        assert!(!Path::new("/kubelet").exists());
    }
}
