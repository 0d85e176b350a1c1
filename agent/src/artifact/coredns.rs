//! CoreDNS, the first artifact: its source from the config
//! (`Downloads.CoreDNS`, `OfflineArtifacts.Source`), its checks (required
//! plugins, reported version), its place in the machine rootfs and the install
//! record that lets an unchanged install be kept.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use super::coredns_record::{self, InstallRecord};
use super::error::io_err;
use super::source::{self, COREDNS, Expected, Resolved};
use super::{ArtifactError, Fetcher, Installed, fetch_verify_install, offline, plugins};
use crate::config::{DownloadSource, RawConfig};
use crate::files::beneath::beneath;

/// Where CoreDNS goes inside the machine rootfs.
pub const INSTALL_PATH: &str = "usr/local/bin/coredns";

/// The parts of the config that decide which CoreDNS to install.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    /// `Downloads.CoreDNS`.
    pub download: DownloadSource,
    /// `OfflineArtifacts.Source`: when set, the bundle and never the network.
    pub offline_source: Option<String>,
    /// The baseline plus `LocalDNS.RequiredPlugins`.
    pub required_plugins: Vec<String>,
}

impl Request {
    /// From the config as written (only these three parts are read).
    pub fn from_raw(config: &RawConfig) -> Request {
        let configured = config
            .local_dns
            .as_ref()
            .and_then(|l| l.required_plugins.clone())
            .unwrap_or_default();
        Request {
            download: config
                .downloads
                .as_ref()
                .and_then(|d| d.core_dns.clone())
                .unwrap_or_default(),
            offline_source: config
                .offline_artifacts
                .as_ref()
                .and_then(|o| o.source.clone())
                .filter(|s| !s.trim().is_empty()),
            required_plugins: plugins::required_plugins(&configured),
        }
    }

    /// The source: the offline bundle when one is configured, else online.
    pub fn resolve(&self, arch: &str) -> Result<Resolved, ArtifactError> {
        match &self.offline_source {
            Some(source) => {
                let dir = offline::bundle_dir(source)?;
                let wanted = self.download.version.as_deref().filter(|v| !v.trim().is_empty());
                offline::resolve_offline(&COREDNS, &dir, wanted, arch)
                    .map(|r| source::with_pin(r, self.download.pinned(COREDNS.name)))
            }
            None => source::resolve_online(&COREDNS, Some(&self.download), None, arch),
        }
    }
}

/// The installed binary's path for a machine rootfs.
pub fn install_path(rootfs: &Path) -> PathBuf {
    rootfs.join(INSTALL_PATH)
}

/// What [`install`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreDnsInstall {
    /// The binary installed, or the one kept.
    pub installed: Installed,
    /// False when the binary there was kept (its install record covered the request).
    pub changed: bool,
    /// The install record's bytes (the install state's manifest records their digest).
    pub record: Vec<u8>,
}

/// Fetches, verifies and installs CoreDNS into `<rootfs>/usr/local/bin/coredns`, unless the
/// binary there is the one its install record names and the record covers this request (the
/// source's digest is the same and every required plugin was listed): then it is kept, and
/// nothing but the sidecar is fetched. The returned version is the one the binary reports.
pub fn install(request: &Request, rootfs: &Path, fetcher: &Fetcher) -> Result<CoreDnsInstall, ArtifactError> {
    if !rootfs.is_dir() {
        return Err(ArtifactError::InvalidSource {
            field: "rootfs".into(),
            reason: format!("{} is not a directory", rootfs.display()),
        });
    }
    refuse_symlinks_below(rootfs, INSTALL_PATH)?;
    refuse_symlinks_below(rootfs, coredns_record::relative_path())?;
    let resolved = request.resolve(source::host_arch()?)?;
    let expected = super::expected_sha256(&resolved, fetcher)?;
    if let Some(kept) = kept(request, rootfs, &resolved, &expected) {
        return Ok(kept);
    }
    // The payload is checked against the digest just read (the sidecar is fetched once).
    let resolved = Resolved {
        expected: Expected::Pinned(expected),
        ..resolved
    };
    let reported = RefCell::new(None);
    let validate = |candidate: &Path| {
        let plugins = plugins::check_required_plugins(candidate, &request.required_plugins)?;
        *reported.borrow_mut() = Some((plugins, plugins::binary_version(candidate)?));
        Ok(())
    };
    // Written through the rootfs's open directory: a link swapped in after the check above is
    // not followed either.
    let dest = beneath(rootfs, Path::new(INSTALL_PATH)).map_err(io_err("reach", install_path(rootfs)))?;
    let mut installed = fetch_verify_install(&COREDNS, &resolved, &dest.path(), fetcher, &validate)
        .inspect_err(|_| dest.remove_made_dirs())?;
    installed.path = install_path(rootfs);
    let (plugins, version) = reported
        .into_inner()
        .expect("the candidate was checked before it was installed");
    if version != installed.version {
        tracing::warn!(expected = %installed.version, reported = %version, "CoreDNS reports another version");
    }
    installed.version = version;
    let record = InstallRecord {
        source_sha256: installed.source_sha256.clone(),
        sha256: installed.sha256.clone(),
        version: installed.version.clone(),
        plugins: plugins.into_iter().collect(),
    }
    .write(rootfs)?;
    Ok(CoreDnsInstall {
        installed,
        changed: true,
        record,
    })
}

/// The install already there, when its record covers the request and the binary is the one
/// recorded.
fn kept(
    request: &Request,
    rootfs: &Path,
    resolved: &Resolved,
    source_sha256: &str,
) -> Option<CoreDnsInstall> {
    let (record, bytes) = InstallRecord::read(rootfs)?;
    let binary = install_path(rootfs);
    if !record.covers(source_sha256, &request.required_plugins) || !record.matches_binary(&binary) {
        return None;
    }
    Some(CoreDnsInstall {
        installed: Installed {
            name: COREDNS.name.to_string(),
            path: binary,
            version: record.version,
            sha256: record.sha256,
            source: resolved.location.to_string(),
            source_sha256: record.source_sha256,
            bundle: resolved.bundle.clone(),
        },
        changed: false,
        record: bytes,
    })
}

/// Refuses to install when a directory on the way (`usr`, `usr/local`,
/// `usr/local/bin`) is a symbolic link: resolved on the host it could point
/// out of the machine rootfs.
fn refuse_symlinks_below(rootfs: &Path, relative: &str) -> Result<(), ArtifactError> {
    let mut path = rootfs.to_path_buf();
    let parent = Path::new(relative).parent().unwrap_or(Path::new(""));
    for part in parent.components() {
        path.push(part);
        if path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(ArtifactError::InvalidSource {
                field: "rootfs".into(),
                reason: format!(
                    "{} is a symbolic link; refusing to install through it",
                    path.display()
                ),
            });
        }
    }
    Ok(())
}

/// Checks, without downloading the binary, that the source is reachable
/// (online: its sidecar answers) or present (offline); returns what was checked.
pub fn probe(request: &Request, fetcher: &Fetcher) -> Result<Resolved, ArtifactError> {
    let resolved = request.resolve(source::host_arch()?)?;
    super::probe(&resolved, fetcher)?;
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::FetchOptions;

    /// `usr/local` is on the way to the binary, `var/lib` on the way to the install record.
    #[rstest::rstest]
    #[case::on_the_way_to_the_binary("usr", "usr/local")]
    #[case::on_the_way_to_the_install_record("var", "var/lib")]
    fn a_symlinked_directory_in_the_rootfs_is_refused_and_its_target_untouched(
        #[case] parent: &str,
        #[case] link: &str,
    ) {
        let rootfs = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(rootfs.path().join(parent)).unwrap();
        std::os::unix::fs::symlink(outside.path(), rootfs.path().join(link)).unwrap();
        let request = Request {
            offline_source: Some("/nonexistent".into()),
            ..Request::default()
        };
        let err = install(&request, rootfs.path(), &Fetcher::new(FetchOptions::default())).unwrap_err();
        assert!(
            err.to_string().contains(&format!("{link} is a symbolic link")),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_rootfs_is_refused() {
        let err = install(
            &Request::default(),
            Path::new("/nonexistent/rootfs"),
            &Fetcher::new(FetchOptions::default()),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "rootfs: /nonexistent/rootfs is not a directory");
    }
}
