//! Shared pieces of the artifact tests: the real CoreDNS artifact from the
//! cache, a machine rootfs with an existing binary, crafted tarballs, requests.

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent::artifact::coredns::{self, CoreDnsInstall, Request};
use agent::artifact::coredns_record::{InstallRecord, record_path};
use agent::artifact::plugins::required_plugins;
use agent::artifact::{ArtifactError, FetchOptions, Fetcher, Installed};
use agent::config::DownloadSource;
use flate2::Compression;
use flate2::write::GzEncoder;
use harness::cache::Cache;
use harness::images::coredns::{CoreDnsArtifact, require, write_sidecar};

/// The real CoreDNS artifact; the test fails naming the command that builds it.
pub fn artifact() -> CoreDnsArtifact {
    let cache = Cache::open().expect("open the lab cache");
    match require(&cache) {
        Ok(artifact) => artifact,
        Err(err) => panic!("{}", agent::error_chain::Chain(&err)),
    }
}

/// Fast retries so retry counts are quick to observe.
pub fn fetcher() -> Fetcher {
    Fetcher::new(FetchOptions {
        attempts: 3,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(40),
        connect_timeout: Duration::from_secs(5),
        timeout: Duration::from_secs(60),
        ..FetchOptions::default()
    })
}

pub fn online(url: Option<String>, base_url: Option<String>) -> Request {
    Request {
        download: DownloadSource {
            url,
            base_url,
            // The test server is plain http on loopback.
            allow_http: Some(true),
            ..DownloadSource::default()
        },
        offline_source: None,
        required_plugins: required_plugins(&[]),
    }
}

pub fn offline(bundle: &Path) -> Request {
    Request {
        offline_source: Some(bundle.display().to_string()),
        ..online(None, None)
    }
}

/// A machine rootfs; with `existing`, `usr/local/bin/coredns` already holds an old binary.
pub struct Rootfs {
    pub dir: tempfile::TempDir,
}

pub const OLD_BINARY: &str = "#!/bin/sh\necho CoreDNS-0.0.1-old\n";

impl Rootfs {
    pub fn empty() -> Rootfs {
        Rootfs {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn with_existing_binary() -> Rootfs {
        let rootfs = Rootfs::empty();
        let dest = rootfs.binary();
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        fs::write(&dest, OLD_BINARY).unwrap();
        fs::set_permissions(&dest, fs::Permissions::from_mode(0o755)).unwrap();
        rootfs
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn binary(&self) -> PathBuf {
        coredns::install_path(self.path())
    }

    pub fn install(&self, request: &Request) -> Result<Installed, ArtifactError> {
        self.install_or_keep(request).map(|done| done.installed)
    }

    /// The install with whether it wrote the binary and the install record it left.
    pub fn install_or_keep(&self, request: &Request) -> Result<CoreDnsInstall, ArtifactError> {
        coredns::install(request, self.path(), &fetcher())
    }

    /// The install record as it is on disk.
    pub fn record(&self) -> Option<InstallRecord> {
        InstallRecord::read(self.path()).map(|(record, _)| record)
    }

    /// The install directory holds only `coredns`, still the old one, mode 0755: nothing changed.
    pub fn assert_untouched(&self) {
        let dir = self.binary().parent().unwrap().to_path_buf();
        let names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["coredns"], "temporary files left in {}", dir.display());
        assert_eq!(
            fs::read_to_string(self.binary()).unwrap(),
            OLD_BINARY,
            "existing binary was changed"
        );
        let mode = fs::metadata(self.binary()).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755);
        assert!(
            !record_path(self.path()).exists(),
            "a refused install wrote an install record"
        );
    }

    /// The real binary was installed: same bytes as the artifact's, 0755, alone in its directory.
    pub fn assert_installed(&self, installed: &Installed, artifact: &CoreDnsArtifact) {
        assert_eq!(installed.path, self.binary());
        assert_eq!(installed.version, artifact.version);
        assert_eq!(installed.sha256, artifact.binary_sha256);
        let on_disk = agent::artifact::checksum::sha256_file(&self.binary()).unwrap();
        assert_eq!(on_disk, artifact.binary_sha256);
        let mode = fs::metadata(self.binary()).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755);
        let entries = fs::read_dir(self.binary().parent().unwrap()).unwrap().count();
        assert_eq!(entries, 1, "temporary files left beside the binary");
    }
}

/// A tarball with the given members (raw names, so `..` and `/` can be written),
/// plus its correct sidecar; returns the tarball's path.
pub fn crafted_tarball(dir: &Path, file_name: &str, members: &[(&str, tar::EntryType, &[u8])]) -> PathBuf {
    let path = dir.join(file_name);
    let mut builder = tar::Builder::new(GzEncoder::new(File::create(&path).unwrap(), Compression::fast()));
    for (name, kind, data) in members {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(*kind);
        header.set_size(data.len() as u64);
        header.set_mode(0o755);
        let field = &mut header.as_old_mut().name;
        field.fill(0);
        field[..name.len()].copy_from_slice(name.as_bytes());
        if *kind == tar::EntryType::Symlink {
            header.set_link_name("/usr/bin/env").unwrap();
        }
        header.set_cksum();
        builder.append(&header, *data).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap();
    write_sidecar(&path).unwrap();
    path
}

/// `<path>.sha256`.
pub fn sidecar(path: &Path) -> PathBuf {
    let mut os = path.as_os_str().to_owned();
    os.push(".sha256");
    PathBuf::from(os)
}
