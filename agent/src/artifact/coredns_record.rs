//! CoreDNS's install record in the machine rootfs (`/var/lib/unbounded/coredns-install.json`):
//! the archive's digest, the binary's digest, its version and every plugin it listed, written
//! after an install so that the next one can keep the binary rather than fetch, inflate and ask
//! it again when the source's digest is the same and the binary is still the one recorded.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ArtifactError;
use super::checksum;
use super::error::io_err;

/// Where the record lives inside the machine rootfs (relative to it).
pub fn relative_path() -> &'static str {
    crate::paths::COREDNS_INSTALL_RECORD.trim_start_matches('/')
}

/// What was checked when CoreDNS was installed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstallRecord {
    /// SHA-256 of what was fetched (the tarball for archives), as its sidecar or the pin said.
    pub source_sha256: String,
    /// SHA-256 of the installed binary.
    pub sha256: String,
    /// The version the binary reported.
    pub version: String,
    /// Every plugin `coredns -plugins` listed.
    pub plugins: Vec<String>,
}

/// The record's path for a machine rootfs.
pub fn record_path(rootfs: &Path) -> PathBuf {
    rootfs.join(relative_path())
}

impl InstallRecord {
    /// The record in `rootfs`, or `None` when there is none or it cannot be read as one (the
    /// binary is then installed again, which writes a new record).
    pub fn read(rootfs: &Path) -> Option<(InstallRecord, Vec<u8>)> {
        let bytes = std::fs::read(record_path(rootfs)).ok()?;
        let record = serde_json::from_slice(&bytes).ok()?;
        Some((record, bytes))
    }

    /// Whether the binary recorded is what an install from a source of digest `source_sha256`
    /// asking for `required` plugins would leave.
    pub fn covers(&self, source_sha256: &str, required: &[String]) -> bool {
        self.source_sha256 == source_sha256 && required.iter().all(|p| self.plugins.contains(p))
    }

    /// Whether `binary` is still the file recorded: a regular file (not a link) with the recorded
    /// digest (hashed: nothing else proves it).
    pub fn matches_binary(&self, binary: &Path) -> bool {
        binary.symlink_metadata().is_ok_and(|m| m.is_file())
            && checksum::sha256_file(binary).is_ok_and(|have| have == self.sha256)
    }

    /// Writes the record into `rootfs` atomically; returns its bytes.
    pub fn write(&self, rootfs: &Path) -> Result<Vec<u8>, ArtifactError> {
        let path = record_path(rootfs);
        let mut bytes = serde_json::to_vec_pretty(self).expect("the record serialises");
        bytes.push(b'\n');
        let dest = crate::files::beneath::beneath(rootfs, Path::new(relative_path()))
            .map_err(io_err("reach", &path))?;
        crate::files::write_atomic(&dest.path(), &bytes, 0o644).map_err(io_err("write", path))?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(binary: &Path) -> InstallRecord {
        InstallRecord {
            source_sha256: "a".repeat(64),
            sha256: checksum::sha256_file(binary).unwrap(),
            version: "1.15.0".into(),
            plugins: ["bind", "cache", "forward", "hosts"].map(String::from).to_vec(),
        }
    }

    #[test]
    fn a_record_covers_the_same_source_and_any_subset_of_its_plugins_only() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("coredns");
        std::fs::write(&binary, b"binary").unwrap();
        let r = record(&binary);
        let want = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(r.covers(&"a".repeat(64), &want(&["cache", "hosts"])));
        assert!(!r.covers(&"b".repeat(64), &want(&["cache"])), "another archive");
        assert!(
            !r.covers(&"a".repeat(64), &want(&["cache", "alternate"])),
            "a plugin not listed"
        );
    }

    #[test]
    fn a_record_is_read_back_as_written_and_a_changed_binary_no_longer_matches() {
        let rootfs = tempfile::tempdir().unwrap();
        let binary = rootfs.path().join("coredns");
        std::fs::write(&binary, b"binary").unwrap();
        let r = record(&binary);
        let bytes = r.write(rootfs.path()).unwrap();
        assert_eq!(InstallRecord::read(rootfs.path()), Some((r.clone(), bytes)));
        assert!(r.matches_binary(&binary));
        std::fs::write(&binary, b"binarx").unwrap();
        assert!(!r.matches_binary(&binary));
        std::fs::remove_file(&binary).unwrap();
        assert!(!r.matches_binary(&binary));
        let elsewhere = rootfs.path().join("elsewhere");
        std::fs::write(&elsewhere, b"binary").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &binary).unwrap();
        assert!(!r.matches_binary(&binary), "a link to the right bytes");
    }

    #[test]
    fn an_unreadable_or_foreign_record_is_no_record() {
        let rootfs = tempfile::tempdir().unwrap();
        assert_eq!(InstallRecord::read(rootfs.path()), None);
        let path = record_path(rootfs.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"{\"sha256\": 1}").unwrap();
        assert_eq!(InstallRecord::read(rootfs.path()), None);
        std::fs::write(&path, b"not json").unwrap();
        assert_eq!(InstallRecord::read(rootfs.path()), None);
    }
}
