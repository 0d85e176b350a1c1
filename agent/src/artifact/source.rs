//! Where an artifact comes from: the upstream layouts, the config overrides and
//! the resulting [`Location`] (HTTP(S) address or local file).
//!
//! Resolution is pure: it reads no file and makes no request (the offline
//! bundle's manifest is read by [`super::offline`]).

use std::fmt;
use std::path::{Path, PathBuf};

use url::Url;

use super::ArtifactError;
use crate::config::DownloadSource;

/// How an upstream project lays out its release downloads under a base address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamLayout {
    /// `<base>/v<ver>/<name>_<ver>_linux_<arch>.tgz` holding one file `<name>`
    /// (CoreDNS; sidecar `<hex>  <file name>`).
    ReleaseTarball,
    /// `<base>/v<ver>/bin/linux/<arch>/<name>`, a bare binary
    /// (Kubernetes `dl.k8s.io`; sidecar holds the bare hex).
    KubernetesBinary,
}

/// One kind of artifact the agent fetches: everything that differs between
/// CoreDNS, kubelet, kubectl, ... is here; the pipeline is shared.
#[derive(Clone, Copy, Debug)]
pub struct ArtifactSpec {
    /// The installed file's name and the archive member's name (`coredns`).
    pub name: &'static str,
    /// The config path of its download override, for messages (`Downloads.CoreDNS`).
    pub config_path: &'static str,
    /// The key under `versions` in the offline bundle's `manifest.json`,
    /// and the bundle's top directory (`coredns`, `kubernetes`).
    pub bundle_key: &'static str,
    /// The upstream release base address that `BaseURL` replaces.
    pub default_base_url: &'static str,
    /// The version used when the config names none (`None`: it must be given).
    pub default_version: Option<&'static str>,
    pub layout: UpstreamLayout,
}

/// The CoreDNS version the agent installs unless told otherwise; the lab builds
/// the same one (`images/coredns/recipe.env`).
pub const COREDNS_DEFAULT_VERSION: &str = "1.15.0";

/// CoreDNS from its GitHub releases (docs/design.md §4).
pub const COREDNS: ArtifactSpec = ArtifactSpec {
    name: "coredns",
    config_path: "Downloads.CoreDNS",
    bundle_key: "coredns",
    default_base_url: "https://github.com/coredns/coredns/releases/download",
    default_version: Some(COREDNS_DEFAULT_VERSION),
    layout: UpstreamLayout::ReleaseTarball,
};

/// kubelet from the Kubernetes download site (version from `Cluster.Version`).
pub const KUBELET: ArtifactSpec = ArtifactSpec {
    name: "kubelet",
    config_path: "Downloads.Kubernetes",
    bundle_key: "kubernetes",
    default_base_url: "https://dl.k8s.io/release",
    default_version: None,
    layout: UpstreamLayout::KubernetesBinary,
};

/// kubectl, laid out like kubelet.
pub const KUBECTL: ArtifactSpec = ArtifactSpec {
    name: "kubectl",
    ..KUBELET
};

impl ArtifactSpec {
    /// The path below the base address for `version` (without `v`) and `arch`.
    pub fn upstream_path(&self, version: &str, arch: &str) -> String {
        let name = self.name;
        match self.layout {
            UpstreamLayout::ReleaseTarball => format!("v{version}/{name}_{version}_linux_{arch}.tgz"),
            UpstreamLayout::KubernetesBinary => format!("v{version}/bin/linux/{arch}/{name}"),
        }
    }

    /// The binary's path inside an offline bundle (its sidecar is `<path>.sha256`).
    pub fn bundle_path(&self, version: &str, arch: &str) -> PathBuf {
        PathBuf::from(format!(
            "{}/v{version}/bin/linux/{arch}/{}",
            self.bundle_key, self.name
        ))
    }
}

/// The Go-style architecture name of this host (`amd64`, `arm64`).
pub fn host_arch() -> Result<&'static str, ArtifactError> {
    match std::env::consts::ARCH {
        "x86_64" => Ok("amd64"),
        "aarch64" => Ok("arm64"),
        other => Err(ArtifactError::InvalidSource {
            field: "host architecture".into(),
            reason: format!("{other} has no upstream release artifacts"),
        }),
    }
}

/// A version as written in config or manifest (`1.15.0` or `v1.15.0`), without the `v`.
pub fn normalize_version(field: &str, raw: &str) -> Result<String, ArtifactError> {
    let version = raw.trim().trim_start_matches('v');
    let ok = !version.is_empty()
        && version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
    if ok {
        Ok(version.to_string())
    } else {
        Err(ArtifactError::InvalidSource {
            field: field.into(),
            reason: format!("{raw:?} is not a version like 1.15.0"),
        })
    }
}

/// Where the bytes are read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Http(Url),
    File(PathBuf),
}

impl Location {
    /// Parses `http://`, `https://`, `file://` addresses and absolute paths;
    /// `field` names the config path for the error.
    pub fn parse(field: &str, raw: &str) -> Result<Location, ArtifactError> {
        let invalid = |reason: String| ArtifactError::InvalidSource {
            field: field.to_string(),
            reason,
        };
        if raw.starts_with('/') {
            return Ok(Location::File(PathBuf::from(raw)));
        }
        let url =
            Url::parse(raw).map_err(|e| invalid(format!("{raw:?} is not a URL or absolute path: {e}")))?;
        match url.scheme() {
            "http" | "https" => Ok(Location::Http(url)),
            "file" => url
                .to_file_path()
                .map(Location::File)
                .map_err(|()| invalid(format!("{raw:?} is not a local file URL"))),
            other => Err(invalid(format!(
                "{raw:?}: scheme {other:?} is not supported (http, https, file or an absolute path)"
            ))),
        }
    }

    /// The checksum sidecar: the same address with `.sha256` appended to its path.
    pub fn sidecar(&self) -> Location {
        match self {
            Location::Http(url) => {
                let mut url = url.clone();
                let path = format!("{}.sha256", url.path());
                url.set_path(&path);
                Location::Http(url)
            }
            Location::File(path) => {
                let mut os = path.clone().into_os_string();
                os.push(".sha256");
                Location::File(PathBuf::from(os))
            }
        }
    }

    /// The path part only: an archive is decided on it, never on a substring
    /// of the whole address (a query or host name does not count).
    fn path_text(&self) -> String {
        match self {
            Location::Http(url) => url.path().to_string(),
            Location::File(path) => path.to_string_lossy().into_owned(),
        }
    }

    /// True when the path ends in `.tgz` or `.tar.gz`.
    pub fn is_archive(&self) -> bool {
        let path = self.path_text();
        path.ends_with(".tgz") || path.ends_with(".tar.gz")
    }

    /// The last path segment (what an upstream sidecar names).
    pub fn file_name(&self) -> Option<String> {
        let path = self.path_text();
        let name = Path::new(&path).file_name()?.to_string_lossy().into_owned();
        (!name.is_empty()).then_some(name)
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Http(url) => write!(f, "{url}"),
            Location::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// How the payload's expected digest is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    /// From `<location>.sha256` (CoreDNS, kubelet, kubectl, offline bundles).
    Sidecar,
    /// Given in the config (`MachineImage.SHA256`, `ContainerImages[].SHA256`).
    Pinned(String),
}

/// A fully resolved source: what to fetch, which version it is, how to check it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub location: Location,
    pub version: String,
    pub arch: String,
    pub expected: Expected,
    /// The offline bundle it comes from, if any (never a network fallback).
    pub bundle: Option<PathBuf>,
}

/// Resolves an online source from the config's override (docs/design.md §4): `URL` is
/// the whole address with `{version}` and `{arch}` replaced; else `BaseURL`
/// (or the upstream base) plus the upstream layout.
pub fn resolve_online(
    spec: &ArtifactSpec,
    download: Option<&DownloadSource>,
    fallback_version: Option<&str>,
    arch: &str,
) -> Result<Resolved, ArtifactError> {
    let version = resolve_version(spec, download, fallback_version)?;
    let (field, address) = match download {
        Some(DownloadSource { url: Some(url), .. }) if !url.trim().is_empty() => (
            format!("{}.URL", spec.config_path),
            url.trim().replace("{version}", &version).replace("{arch}", arch),
        ),
        _ => {
            let base = download
                .and_then(|d| d.base_url.as_deref())
                .map(str::trim)
                .filter(|b| !b.is_empty())
                .unwrap_or(spec.default_base_url);
            (
                format!("{}.BaseURL", spec.config_path),
                format!(
                    "{}/{}",
                    base.trim_end_matches('/'),
                    spec.upstream_path(&version, arch)
                ),
            )
        }
    };
    let location = Location::parse(&field, &address)?;
    let allow_http = download.and_then(|d| d.allow_http) == Some(true);
    if matches!(&location, Location::Http(url) if url.scheme() == "http") && !allow_http {
        return Err(ArtifactError::InvalidSource {
            reason: format!(
                "{address} is plain http, which this source does not allow: use https://, \
                 or set {}.AllowHTTP to true to fetch it without TLS",
                spec.config_path
            ),
            field,
        });
    }
    let resolved = Resolved {
        location,
        version,
        arch: arch.to_string(),
        expected: Expected::Sidecar,
        bundle: None,
    };
    Ok(with_pin(resolved, download.and_then(|d| d.pinned(spec.name))))
}

/// `resolved` checked against `pin` when there is one (online or from a bundle), never against
/// a sidecar.
pub fn with_pin(resolved: Resolved, pin: Option<&str>) -> Resolved {
    match pin {
        Some(hex) => Resolved {
            expected: Expected::Pinned(hex.to_owned()),
            ..resolved
        },
        None => resolved,
    }
}

/// The configured version, else the caller's fallback (e.g. `Cluster.Version`),
/// else the design's default (docs/design.md §4).
pub fn resolve_version(
    spec: &ArtifactSpec,
    download: Option<&DownloadSource>,
    fallback_version: Option<&str>,
) -> Result<String, ArtifactError> {
    let field = format!("{}.Version", spec.config_path);
    let configured = download
        .and_then(|d| d.version.as_deref())
        .filter(|v| !v.trim().is_empty());
    match configured.or(fallback_version).or(spec.default_version) {
        Some(raw) => normalize_version(&field, raw),
        None => Err(ArtifactError::InvalidSource {
            field,
            reason: format!("no version given for {}", spec.name),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(url: Option<&str>, base: Option<&str>, version: Option<&str>) -> DownloadSource {
        DownloadSource {
            url: url.map(Into::into),
            base_url: base.map(Into::into),
            version: version.map(Into::into),
            allow_http: Some(true),
            ..Default::default()
        }
    }

    #[test]
    fn default_coredns_source_is_the_github_release_tarball() {
        let r = resolve_online(&COREDNS, None, None, "amd64").unwrap();
        assert_eq!(
            r.location.to_string(),
            "https://github.com/coredns/coredns/releases/download/v1.15.0/coredns_1.15.0_linux_amd64.tgz"
        );
        assert_eq!(
            r.location.sidecar().to_string(),
            "https://github.com/coredns/coredns/releases/download/v1.15.0/coredns_1.15.0_linux_amd64.tgz.sha256"
        );
        assert!(r.location.is_archive());
    }

    #[test]
    fn base_url_replaces_the_upstream_base_and_keeps_the_layout() {
        let d = source(None, Some("http://10.0.0.1:8080/mirror/"), Some("v1.14.7"));
        let r = resolve_online(&COREDNS, Some(&d), None, "arm64").unwrap();
        assert_eq!(
            r.location.to_string(),
            "http://10.0.0.1:8080/mirror/v1.14.7/coredns_1.14.7_linux_arm64.tgz"
        );
        assert_eq!(r.version, "1.14.7");
    }

    #[test]
    fn url_replaces_version_and_arch_and_wins_over_base_url() {
        let d = source(
            Some("http://h/{version}/cd-{arch}.tar.gz"),
            Some("http://ignored"),
            Some("1.2.3"),
        );
        let r = resolve_online(&COREDNS, Some(&d), None, "amd64").unwrap();
        assert_eq!(r.location.to_string(), "http://h/1.2.3/cd-amd64.tar.gz");
        assert!(r.location.is_archive());
    }

    /// What validation refuses, the resolver refuses too (`coredns install` reads its config
    /// without validating it): plain http only with the source's `AllowHTTP`.
    #[test]
    fn plain_http_resolves_only_where_the_source_allows_it() {
        let plain = DownloadSource {
            allow_http: None,
            ..source(None, Some("http://10.0.0.1:8080/mirror"), Some("1.15.0"))
        };
        let err = resolve_online(&COREDNS, Some(&plain), None, "amd64")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Downloads.CoreDNS.BaseURL")
                && err.contains("is plain http, which this source does not allow")
                && err.contains("set Downloads.CoreDNS.AllowHTTP to true"),
            "{err}"
        );
        let allowed = DownloadSource {
            allow_http: Some(true),
            ..plain
        };
        assert!(resolve_online(&COREDNS, Some(&allowed), None, "amd64").is_ok());
    }

    #[test]
    fn archive_is_judged_on_the_path_not_a_substring() {
        let q = Location::parse("f", "http://h.tgz.example/coredns?x=a.tgz").unwrap();
        assert!(!q.is_archive());
        assert_eq!(
            q.sidecar().to_string(),
            "http://h.tgz.example/coredns.sha256?x=a.tgz"
        );
        assert!(!Location::parse("f", "/srv/coredns.tgz.bin").unwrap().is_archive());
        assert!(Location::parse("f", "file:///srv/c.tar.gz").unwrap().is_archive());
    }

    #[test]
    fn file_urls_and_absolute_paths_are_local_files() {
        assert_eq!(
            Location::parse("f", "file:///srv/a%20b/coredns").unwrap(),
            Location::File("/srv/a b/coredns".into())
        );
        assert_eq!(
            Location::parse("f", "/srv/coredns").unwrap(),
            Location::File("/srv/coredns".into())
        );
    }

    #[test]
    fn relative_paths_and_other_schemes_are_refused_naming_the_field() {
        for raw in ["coredns.tgz", "ftp://h/coredns", "./x"] {
            let err = Location::parse("Downloads.CoreDNS.URL", raw)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("Downloads.CoreDNS.URL: "), "{err}");
        }
    }

    #[test]
    fn kubernetes_layout_is_a_bare_binary_under_bin_linux_arch() {
        let d = source(None, Some("http://mirror"), None);
        let r = resolve_online(&KUBELET, Some(&d), Some("v1.35.0"), "amd64").unwrap();
        assert_eq!(
            r.location.to_string(),
            "http://mirror/v1.35.0/bin/linux/amd64/kubelet"
        );
        assert!(!r.location.is_archive());
        assert_eq!(
            KUBECTL.bundle_path("1.35.0", "arm64"),
            PathBuf::from("kubernetes/v1.35.0/bin/linux/arm64/kubectl")
        );
        let err = resolve_online(&KUBELET, None, None, "amd64")
            .unwrap_err()
            .to_string();
        assert!(err.contains("Downloads.Kubernetes.Version"), "{err}");
    }

    #[test]
    fn bad_versions_are_refused() {
        let d = source(None, None, Some("latest"));
        let err = resolve_online(&COREDNS, Some(&d), None, "amd64")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Downloads.CoreDNS.Version") && err.contains("latest"),
            "{err}"
        );
    }
}
