//! Artifacts pinned by digest in the config: the machine rootfs tarball (`MachineImage{URL,SHA256}`)
//! and the container image archives (`ContainerImages[{Ref,URL,SHA256}]`), online or from the
//! offline bundle (`rootfs/<file>`, `container-images/<arch>/<file>`, never the network).
//!
//! Their bytes go through the same pipeline as the binaries ([`super::fetch_verified`]); only
//! where they land differs ([`super::tree`] for the rootfs, [`install_data_file`] for archives).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::error::io_err;
use super::install::Staging;
use super::source::{Expected, Location, Resolved};
use super::{ArtifactError, Fetcher, Installed, fetch_verified};

/// Where one pinned artifact comes from, as the config gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedRequest {
    /// The config path, for messages (`MachineImage`, `ContainerImages[0]`).
    pub field: String,
    /// The name the artifact is known by (`rootfs`, or the image ref).
    pub name: String,
    pub url: Option<String>,
    /// Lowercase hex, when pinned; otherwise the `.sha256` sidecar counts.
    pub sha256: Option<String>,
    /// The bundle directory below which offline files are (`rootfs`, `container-images/amd64`).
    pub bundle_subdir: String,
}

impl PinnedRequest {
    /// The machine rootfs tarball.
    pub fn machine_image(url: &str, sha256: &str) -> PinnedRequest {
        PinnedRequest {
            field: "MachineImage".into(),
            name: "rootfs".into(),
            url: Some(url.to_owned()),
            sha256: Some(sha256.to_owned()),
            bundle_subdir: "rootfs".into(),
        }
    }

    /// Container image archive number `index` of `ContainerImages`.
    pub fn container_image(
        index: usize,
        reference: &str,
        url: Option<&str>,
        sha256: Option<&str>,
        arch: &str,
    ) -> PinnedRequest {
        PinnedRequest {
            field: format!("ContainerImages[{index}]"),
            name: reference.to_owned(),
            url: url.map(str::to_owned),
            sha256: sha256.map(str::to_owned),
            bundle_subdir: format!("container-images/{arch}"),
        }
    }

    /// The file name: the URL's last path segment, else (container images only) the ref with
    /// every character outside `[A-Za-z0-9._-]` replaced by `_`, plus `.tar`.
    pub fn file_name(&self) -> Result<String, ArtifactError> {
        if let Some(url) = &self.url {
            let location = Location::parse(&format!("{}.URL", self.field), url)?;
            return location.file_name().ok_or_else(|| ArtifactError::InvalidSource {
                field: format!("{}.URL", self.field),
                reason: format!("{url:?} names no file"),
            });
        }
        let safe: String = self
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Ok(format!("{safe}.tar"))
    }

    fn expected(&self) -> Expected {
        match &self.sha256 {
            Some(hex) => Expected::Pinned(hex.clone()),
            None => Expected::Sidecar,
        }
    }

    /// The source: the bundle's file when `offline_bundle` is set (never the network),
    /// else the URL.
    pub fn resolve(&self, offline_bundle: Option<&Path>, arch: &str) -> Result<Resolved, ArtifactError> {
        let location = match offline_bundle {
            Some(bundle) => {
                let relative = PathBuf::from(&self.bundle_subdir).join(self.file_name()?);
                let path = bundle.join(&relative);
                if !path.is_file() {
                    return Err(ArtifactError::Offline {
                        bundle: bundle.to_path_buf(),
                        reason: format!(
                            "{} ({}) is missing: {} is not a file",
                            self.field,
                            self.name,
                            relative.display()
                        ),
                    });
                }
                Location::File(path)
            }
            None => {
                let url = self.url.as_deref().ok_or_else(|| ArtifactError::InvalidSource {
                    field: format!("{}.URL", self.field),
                    reason: "is required unless OfflineArtifacts.Source is set".into(),
                })?;
                Location::parse(&format!("{}.URL", self.field), url)?
            }
        };
        Ok(Resolved {
            location,
            version: String::new(),
            arch: arch.to_owned(),
            expected: self.expected(),
            bundle: offline_bundle.map(Path::to_path_buf),
        })
    }
}

/// Fetches and verifies `resolved`, and installs it at `dest` with `mode` (a data file, not run).
/// Nothing changes at `dest` on any failure.
pub fn install_data_file(
    name: &str,
    resolved: &Resolved,
    dest: &Path,
    mode: u32,
    fetcher: &Fetcher,
) -> Result<Installed, ArtifactError> {
    let staging = Staging::new(dest)?;
    let (file, sha256) = fetch_verified(resolved, &staging, fetcher)?;
    let path = file.path().to_path_buf();
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io_err("chmod", &path))?;
    file.as_file().sync_all().map_err(io_err("sync", &path))?;
    let installed = staging.commit(file.into_temp_path())?;
    Ok(Installed {
        name: name.to_owned(),
        path: installed,
        version: resolved.version.clone(),
        sha256: sha256.clone(),
        source: resolved.location.to_string(),
        source_sha256: sha256,
        bundle: resolved.bundle.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_files_are_looked_up_under_their_bundle_directory() {
        let bundle = tempfile::tempdir().unwrap();
        let request = PinnedRequest::container_image(
            1,
            "registry.k8s.io/pause:3.10.1",
            Some("http://h/images/pause.tar"),
            None,
            "amd64",
        );
        let err = request
            .resolve(Some(bundle.path()), "amd64")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("container-images/amd64/pause.tar is not a file"),
            "{err}"
        );
        std::fs::create_dir_all(bundle.path().join("container-images/amd64")).unwrap();
        std::fs::write(bundle.path().join("container-images/amd64/pause.tar"), "x").unwrap();
        let r = request.resolve(Some(bundle.path()), "amd64").unwrap();
        assert_eq!(r.expected, Expected::Sidecar);
        assert_eq!(r.bundle.as_deref(), Some(bundle.path()));
    }

    #[test]
    fn a_ref_without_url_gets_a_safe_file_name_and_needs_a_bundle() {
        let request = PinnedRequest::container_image(0, "lab/test:1.0", None, None, "amd64");
        assert_eq!(request.file_name().unwrap(), "lab_test_1.0.tar");
        let err = request.resolve(None, "amd64").unwrap_err().to_string();
        assert_eq!(
            err,
            "ContainerImages[0].URL: is required unless OfflineArtifacts.Source is set"
        );
    }

    #[test]
    fn a_pinned_digest_that_does_not_match_installs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("image.tar");
        std::fs::write(&src, "payload").unwrap();
        let request = PinnedRequest::container_image(
            0,
            "lab/test:1.0",
            Some(src.to_str().unwrap()),
            Some(&"0".repeat(64)),
            "amd64",
        );
        let resolved = request.resolve(None, "amd64").unwrap();
        let dest = dir.path().join("out/image.tar");
        let fetcher = Fetcher::new(super::super::FetchOptions::default());
        let err = install_data_file("image", &resolved, &dest, 0o644, &fetcher).unwrap_err();
        assert!(matches!(err, ArtifactError::ChecksumMismatch { .. }), "{err}");
        assert!(!dest.exists() && !dest.parent().unwrap().exists());
    }
}
