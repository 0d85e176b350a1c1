//! The manifest: every file and link the agent created, on the host and in each slot's rootfs,
//! with its digest (or link target), plus the named host objects (the `localdns` link and the
//! nft table). `apply` removes what the old manifest has and the new one lacks; `reset` removes
//! all of it (and what carries our names even when no manifest survived).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::artifact::checksum::sha256_bytes;
use crate::names::Slot;
use crate::render::{Place, Rendered};

/// One file or link the agent wrote (host path).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub path: PathBuf,
    /// SHA-256 of a regular file's contents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A symbolic link's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<PathBuf>,
}

/// What one slot holds: the files and links written into its rootfs and the host files that
/// belong to it (its `.nspawn` file and unit drop-ins, the LocalDNS network unit).
pub type SlotEntries = Vec<Entry>;

/// Everything the agent created.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Host files shared by both slots (sysctl and module files).
    #[serde(default)]
    pub host: Vec<Entry>,
    /// Per slot.
    #[serde(default)]
    pub slots: BTreeMap<Slot, SlotEntries>,
    /// The `localdns` link and the `ip unbounded_localdns` table exist because of us.
    #[serde(default)]
    pub host_network: bool,
}

/// True for host files that belong to both slots (kernel settings), not to one machine.
pub fn is_shared_host_file(path: &Path) -> bool {
    path == Path::new(crate::render::host_prep::SYSCTL_FILE)
        || path == Path::new(crate::render::host_prep::MODULES_FILE)
}

impl Manifest {
    /// The entries of `rendered` (the node's files for `slot`) plus the binaries installed in the
    /// machine (`(host path, sha256)`), split into shared host files and the slot's own.
    pub fn record(&mut self, slot: Slot, rendered: &Rendered, binaries: &[(PathBuf, String)]) {
        let mut shared = Vec::new();
        let mut own = Vec::new();
        for f in &rendered.files {
            let entry = Entry {
                path: f.path.clone(),
                sha256: Some(sha256_bytes(&f.contents)),
                link: None,
            };
            if f.place == Place::Host && is_shared_host_file(&f.path) {
                shared.push(entry);
            } else {
                own.push(entry);
            }
        }
        for l in &rendered.links {
            own.push(Entry {
                path: l.path.clone(),
                sha256: None,
                link: Some(l.target.clone()),
            });
        }
        for (path, sha256) in binaries {
            own.push(Entry {
                path: path.clone(),
                sha256: Some(sha256.clone()),
                link: None,
            });
        }
        shared.sort();
        own.sort();
        self.host = shared;
        self.slots.insert(slot, own);
    }

    /// The entries of `slot` (empty when none are recorded).
    pub fn slot(&self, slot: Slot) -> &[Entry] {
        self.slots.get(&slot).map(Vec::as_slice).unwrap_or_default()
    }
}

/// Paths in `old` that `new` does not have: what a change of config leaves behind.
pub fn stale(old: &[Entry], new: &[Entry]) -> Vec<PathBuf> {
    old.iter()
        .filter(|o| !new.iter().any(|n| n.path == o.path))
        .map(|o| o.path.clone())
        .collect()
}

/// Paths whose entry differs between `old` and `new`, or that only `new` has.
pub fn changed(old: &[Entry], new: &[Entry]) -> Vec<PathBuf> {
    new.iter()
        .filter(|n| !old.contains(n))
        .map(|n| n.path.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{RenderedFile, RenderedLink};

    fn file(path: &str, place: Place, contents: &str) -> RenderedFile {
        RenderedFile {
            path: path.into(),
            local_path: path.into(),
            place,
            mode: 0o644,
            contents: contents.as_bytes().to_vec(),
        }
    }

    #[test]
    fn kernel_settings_are_shared_and_everything_else_belongs_to_the_slot() {
        let rendered = Rendered {
            files: vec![
                file(crate::render::host_prep::SYSCTL_FILE, Place::Host, "a"),
                file("/etc/systemd/nspawn/kube2.nspawn", Place::Host, "b"),
                file("/var/lib/machines/kube2/etc/resolv.conf", Place::Machine, "c"),
            ],
            links: vec![RenderedLink {
                path: "/var/lib/machines/kube2/etc/systemd/system/x.service".into(),
                local_path: "/etc/systemd/system/x.service".into(),
                place: Place::Machine,
                target: "/dev/null".into(),
            }],
        };
        let mut m = Manifest::default();
        m.record(
            Slot::Kube2,
            &rendered,
            &[(
                "/var/lib/machines/kube2/usr/local/bin/coredns".into(),
                "ff".into(),
            )],
        );
        assert_eq!(m.host.len(), 1);
        assert_eq!(m.slot(Slot::Kube2).len(), 4);
        assert!(m.slot(Slot::Kube1).is_empty());
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<Manifest>(&json).unwrap(), m);
    }

    #[test]
    fn stale_and_changed_compare_paths_and_contents() {
        let e = |p: &str, h: &str| Entry {
            path: p.into(),
            sha256: Some(h.into()),
            link: None,
        };
        let old = [e("/a", "1"), e("/b", "2"), e("/c", "3")];
        let new = [e("/a", "1"), e("/b", "9"), e("/d", "4")];
        assert_eq!(stale(&old, &new), [PathBuf::from("/c")]);
        assert_eq!(changed(&old, &new), [PathBuf::from("/b"), PathBuf::from("/d")]);
    }
}
