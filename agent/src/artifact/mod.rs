//! Third-party artifacts (docs/design.md §4): resolve the source, fetch, verify the
//! SHA-256, extract, check, and install atomically — written once for every
//! artifact the agent fetches; CoreDNS ([`coredns`]) is the first user.
//!
//! The pipeline ([`fetch_verify_install`]): sidecar first (cheap, and a
//! missing one stops everything), then the payload into a temporary file
//! beside the destination, its digest, the single archive member when the
//! address's path ends in `.tgz`/`.tar.gz`, mode 0755, the caller's check of
//! the candidate (e.g. `coredns -plugins`), and finally one `rename`. On any
//! failure nothing is installed and an existing file stays untouched.

pub mod archive;
pub mod checksum;
pub mod coredns;
pub mod coredns_record;
mod error;
pub mod fetch;
pub mod install;
pub mod offline;
pub mod pinned;
pub mod plugins;
pub mod rootfs;
pub mod source;
pub mod tree;

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

pub use error::ArtifactError;
pub use fetch::{FetchOptions, Fetcher};
pub use source::{ArtifactSpec, Expected, Location, Resolved};

use error::io_err;
use install::Staging;

/// What an install put where.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Installed {
    /// The artifact's name (`coredns`).
    pub name: String,
    /// The installed file.
    pub path: PathBuf,
    /// The version (as the binary reports it, when it can).
    pub version: String,
    /// SHA-256 of the installed file.
    pub sha256: String,
    /// Where it came from.
    pub source: String,
    /// SHA-256 of what was fetched (the tarball for archives), as the sidecar said.
    pub source_sha256: String,
    /// The offline bundle it came from, if any.
    pub bundle: Option<PathBuf>,
}

/// Checks a candidate file before it is installed (it is already executable).
pub type Validate<'a> = &'a dyn Fn(&Path) -> Result<(), ArtifactError>;

/// The expected digest of `resolved`: pinned, or read from its sidecar.
pub fn expected_sha256(resolved: &Resolved, fetcher: &Fetcher) -> Result<String, ArtifactError> {
    match &resolved.expected {
        Expected::Pinned(hex) if checksum::is_sha256_hex(hex) => Ok(hex.to_ascii_lowercase()),
        Expected::Pinned(hex) => Err(ArtifactError::InvalidSource {
            field: "SHA256".into(),
            reason: format!("{hex:?} is not a 64-digit hex SHA-256"),
        }),
        Expected::Sidecar => {
            let sidecar = resolved.location.sidecar();
            let bytes = fetcher
                .fetch_small(&sidecar, fetch::SIDECAR_LIMIT)
                .map_err(|err| missing_sidecar(&sidecar, err))?;
            let text = String::from_utf8_lossy(&bytes);
            checksum::parse_sidecar(&text, resolved.location.file_name().as_deref()).map_err(|reason| {
                ArtifactError::BadSidecar {
                    sidecar: sidecar.to_string(),
                    reason,
                }
            })
        }
    }
}

fn missing_sidecar(sidecar: &Location, err: ArtifactError) -> ArtifactError {
    let missing = match &err {
        ArtifactError::HttpStatus { status, .. } => matches!(status, 404 | 410),
        ArtifactError::Io { source, .. } => source.kind() == ErrorKind::NotFound,
        _ => false,
    };
    if missing {
        ArtifactError::MissingSidecar {
            sidecar: sidecar.to_string(),
            reason: err.to_string(),
        }
    } else {
        err
    }
}

/// Fetches `resolved`, verifies it, takes the binary `spec.name` out of an
/// archive if it is one, runs `validate` on it and installs it at `dest`.
pub fn fetch_verify_install(
    spec: &ArtifactSpec,
    resolved: &Resolved,
    dest: &Path,
    fetcher: &Fetcher,
    validate: Validate<'_>,
) -> Result<Installed, ArtifactError> {
    let location = &resolved.location;
    let staging = Staging::new(dest)?;
    let (download, actual) = fetch_verified(resolved, &staging, fetcher)?;
    let binary = if location.is_archive() {
        let mut member = staging.temp_file("new")?;
        archive::extract_single_member(
            download.path(),
            spec.name,
            member.as_file_mut(),
            fetcher.options().max_bytes,
        )
        .map_err(|reason| ArtifactError::Archive {
            archive: location.to_string(),
            reason,
        })?;
        drop(download);
        member
    } else {
        download
    };
    let sealed = staging.seal_executable(binary)?;
    validate(&sealed)?;
    // A plain binary is the download itself, whose digest was just checked; only an archive's
    // member is hashed anew (hashing ~80 MB takes about 2 s under emulation).
    let sha256 = if location.is_archive() {
        checksum::sha256_file(&sealed).map_err(io_err("hash", sealed.to_path_buf()))?
    } else {
        actual.clone()
    };
    let path = staging.commit(sealed)?;
    Ok(Installed {
        name: spec.name.to_string(),
        path,
        version: resolved.version.clone(),
        sha256,
        source: location.to_string(),
        source_sha256: actual,
        bundle: resolved.bundle.clone(),
    })
}

/// Fetches `resolved` into a temporary file of `staging` and checks its SHA-256 against the
/// pinned or sidecar digest; returns the file and its digest. Every artifact's bytes pass here.
pub fn fetch_verified(
    resolved: &Resolved,
    staging: &Staging,
    fetcher: &Fetcher,
) -> Result<(tempfile::NamedTempFile, String), ArtifactError> {
    let location = &resolved.location;
    let expected = expected_sha256(resolved, fetcher)?;
    let mut download = staging.temp_file("download")?;
    fetcher.fetch_into(location, download.as_file_mut(), fetcher.options().max_bytes)?;
    let actual = checksum::sha256_file(download.path()).map_err(io_err("hash", download.path()))?;
    if actual != expected {
        return Err(ArtifactError::ChecksumMismatch {
            source_name: location.to_string(),
            expected,
            actual,
        });
    }
    Ok((download, actual))
}

/// Checks that `resolved` can be had without fetching the payload: its
/// sidecar is reachable (online) or the bundle holds it (offline).
pub fn probe(resolved: &Resolved, fetcher: &Fetcher) -> Result<String, ArtifactError> {
    expected_sha256(resolved, fetcher)
}

#[cfg(test)]
mod tests {
    use super::source::{COREDNS, KUBELET};
    use super::*;

    fn pinned(path: &Path) -> Resolved {
        Resolved {
            location: Location::File(path.to_path_buf()),
            version: "v1.0.0".into(),
            arch: "amd64".into(),
            expected: Expected::Pinned(checksum::sha256_file(path).unwrap()),
            bundle: None,
        }
    }

    #[test]
    fn a_plain_binary_is_recorded_with_the_digest_its_download_was_checked_against() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("kubelet");
        std::fs::write(&source, b"#!/bin/sh\necho kubelet\n").unwrap();
        let dest = dir.path().join("rootfs/usr/local/bin/kubelet");
        let fetcher = Fetcher::new(FetchOptions::default());
        let installed =
            fetch_verify_install(&KUBELET, &pinned(&source), &dest, &fetcher, &|_| Ok(())).unwrap();
        assert_eq!(installed.sha256, checksum::sha256_file(&dest).unwrap());
        assert_eq!(installed.sha256, installed.source_sha256);
        assert_eq!(std::fs::read(&dest).unwrap(), b"#!/bin/sh\necho kubelet\n");
    }

    #[test]
    fn an_archive_member_is_recorded_with_its_own_digest_not_the_archives() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("coredns_1.0.0_linux_amd64.tgz");
        let body = b"#!/bin/sh\necho coredns\n";
        let gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&archive).unwrap(),
            flate2::Compression::default(),
        );
        let mut tar = tar::Builder::new(gz);
        let mut header = tar::Header::new_gnu();
        header.set_size(body.len() as u64);
        header.set_mode(0o755);
        header.set_cksum();
        tar.append_data(&mut header, "coredns", &body[..]).unwrap();
        tar.into_inner().unwrap().finish().unwrap();
        let dest = dir.path().join("rootfs/usr/local/bin/coredns");
        let fetcher = Fetcher::new(FetchOptions::default());
        let installed =
            fetch_verify_install(&COREDNS, &pinned(&archive), &dest, &fetcher, &|_| Ok(())).unwrap();
        assert_eq!(installed.sha256, checksum::sha256_file(&dest).unwrap());
        assert_eq!(installed.source_sha256, checksum::sha256_file(&archive).unwrap());
        assert_ne!(installed.sha256, installed.source_sha256);
        assert_eq!(std::fs::read(&dest).unwrap(), body);
    }
}
