//! Offline bundles: a directory with `manifest.json` (`{"versions":{...}}`)
//! and each artifact at its bundle path with a `.sha256` beside it.
//!
//! An offline source never falls back to the network: whatever is missing
//! from the bundle is an error naming the bundle and the missing part.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ArtifactError;
use super::source::{ArtifactSpec, Expected, Location, Resolved, normalize_version};

/// The bundle's `manifest.json`.
#[derive(Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct Manifest {
    /// Artifact key (`coredns`, `kubernetes`) to version.
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
}

/// The bundle directory named by `OfflineArtifacts.Source` (absolute path or `file://`).
pub fn bundle_dir(source: &str) -> Result<PathBuf, ArtifactError> {
    match Location::parse("OfflineArtifacts.Source", source.trim())? {
        Location::File(path) => Ok(path),
        Location::Http(url) => Err(ArtifactError::InvalidSource {
            field: "OfflineArtifacts.Source".into(),
            reason: format!("{url} is not a local directory (offline bundles are never fetched)"),
        }),
    }
}

/// Reads and parses `<bundle>/manifest.json`.
pub fn read_manifest(bundle: &Path) -> Result<Manifest, ArtifactError> {
    let offline = |reason: String| ArtifactError::Offline {
        bundle: bundle.to_path_buf(),
        reason,
    };
    let path = bundle.join("manifest.json");
    let text =
        std::fs::read_to_string(&path).map_err(|e| offline(format!("cannot read manifest.json: {e}")))?;
    serde_json::from_str(&text).map_err(|e| offline(format!("manifest.json is not a valid manifest: {e}")))
}

/// Resolves `spec` inside the bundle: the manifest's version (which must agree
/// with `wanted_version` when one is configured) and the binary's path.
pub fn resolve_offline(
    spec: &ArtifactSpec,
    bundle: &Path,
    wanted_version: Option<&str>,
    arch: &str,
) -> Result<Resolved, ArtifactError> {
    let offline = |reason: String| ArtifactError::Offline {
        bundle: bundle.to_path_buf(),
        reason,
    };
    let manifest = read_manifest(bundle)?;
    let key = spec.bundle_key;
    let raw = manifest
        .versions
        .get(key)
        .ok_or_else(|| offline(format!("manifest.json has no versions.{key}")))?;
    let version = normalize_version(&format!("manifest.json versions.{key}"), raw)?;
    if let Some(wanted) = wanted_version {
        let wanted = normalize_version(&format!("{}.Version", spec.config_path), wanted)?;
        if wanted != version {
            return Err(offline(format!(
                "manifest.json has {key} {version}, but {wanted} is configured"
            )));
        }
    }
    let relative = spec.bundle_path(&version, arch);
    let path = bundle.join(&relative);
    if !path.is_file() {
        return Err(offline(format!(
            "{} {version} for {arch} is missing ({} is not a file)",
            spec.name,
            relative.display()
        )));
    }
    Ok(Resolved {
        location: Location::File(path),
        version,
        arch: arch.to_string(),
        expected: Expected::Sidecar,
        bundle: Some(bundle.to_path_buf()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::source::COREDNS;

    fn bundle(manifest: &str, with_binary: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("manifest.json"), manifest).unwrap();
        if with_binary {
            let bin = dir.path().join("coredns/v1.15.0/bin/linux/amd64");
            std::fs::create_dir_all(&bin).unwrap();
            std::fs::write(bin.join("coredns"), "x").unwrap();
        }
        dir
    }

    #[test]
    fn bundle_version_and_path_come_from_the_manifest() {
        let dir = bundle(r#"{"versions":{"coredns":"v1.15.0"}}"#, true);
        let r = resolve_offline(&COREDNS, dir.path(), None, "amd64").unwrap();
        assert_eq!(r.version, "1.15.0");
        assert_eq!(
            r.location,
            Location::File(dir.path().join("coredns/v1.15.0/bin/linux/amd64/coredns"))
        );
        assert_eq!(r.bundle.as_deref(), Some(dir.path()));
    }

    #[test]
    fn missing_version_missing_binary_and_mismatch_are_errors() {
        let dir = bundle(r#"{"versions":{"kubernetes":"1.35.0"}}"#, true);
        let err = resolve_offline(&COREDNS, dir.path(), None, "amd64")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no versions.coredns"), "{err}");
        let dir = bundle(r#"{"versions":{"coredns":"1.15.0"}}"#, false);
        let err = resolve_offline(&COREDNS, dir.path(), None, "amd64")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("coredns/v1.15.0/bin/linux/amd64/coredns is not a file"),
            "{err}"
        );
        let dir = bundle(r#"{"versions":{"coredns":"1.15.0"}}"#, true);
        let err = resolve_offline(&COREDNS, dir.path(), Some("1.14.7"), "amd64")
            .unwrap_err()
            .to_string();
        assert!(err.contains("1.14.7 is configured"), "{err}");
        let err = resolve_offline(&COREDNS, dir.path(), None, "arm64")
            .unwrap_err()
            .to_string();
        assert!(err.contains("for arm64 is missing"), "{err}");
    }

    #[test]
    fn missing_manifest_and_http_bundles_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve_offline(&COREDNS, dir.path(), None, "amd64")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot read manifest.json"), "{err}");
        assert!(bundle_dir("http://h/bundle").is_err());
        assert_eq!(bundle_dir("file:///srv/b").unwrap(), PathBuf::from("/srv/b"));
    }
}
