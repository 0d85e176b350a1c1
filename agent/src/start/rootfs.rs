//! Stage `preparing-rootfs`: the machine's rootfs, the node binaries (kubelet, kubectl, CoreDNS,
//! the LocalDNS supervisor), the container image archives and every file of the node, all
//! through `crate::artifact` (sources, retries, checksums, atomic installs, offline bundles).

use std::path::{Path, PathBuf};

use super::StartError;
use super::error::artifact;
use super::files::write_changed;
use crate::artifact::source::{self, KUBECTL, KUBELET, Resolved};
use crate::artifact::{Fetcher, checksum, coredns, offline, pinned, rootfs as rootfs_artifact};
use crate::machine::supervisor_entry;
use crate::paths::SUPERVISOR_BINARY;
use crate::progress::Progress;
use crate::render::Rendered;
use crate::render::host_prep::{MODULES_FILE, SYSCTL_FILE};
use crate::validate::Config;

/// Where the image archives are kept inside the machine (imported from there).
pub use crate::paths::IMAGES_DIR;

/// One container image archive, installed in the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageArchive {
    pub reference: String,
    /// The archive's path inside the machine.
    pub local_path: String,
}

/// The offline bundle, if configured.
pub fn bundle(config: &Config) -> Result<Option<PathBuf>, StartError> {
    config
        .offline_source
        .as_deref()
        .map(offline::bundle_dir)
        .transpose()
        .map_err(artifact("OfflineArtifacts.Source"))
}

fn kubernetes_source(
    config: &Config,
    spec: &source::ArtifactSpec,
    arch: &str,
) -> Result<Resolved, StartError> {
    let wanted = config
        .downloads
        .kubernetes
        .version
        .as_ref()
        .or(config.cluster.version.as_ref())
        .map(|v| v.as_str().to_owned());
    let resolved = match bundle(config)? {
        Some(bundle) => offline::resolve_offline(spec, &bundle, wanted.as_deref(), arch),
        None => {
            let k = &config.downloads.kubernetes;
            let download = crate::config::DownloadSource {
                url: k.url.clone(),
                base_url: k.base_url.clone(),
                version: k.version.as_ref().map(|v| v.as_str().to_owned()),
            };
            let fallback = config.cluster.version.as_ref().map(|v| v.as_str().to_owned());
            source::resolve_online(spec, Some(&download), fallback.as_deref(), arch)
        }
    };
    resolved.map_err(artifact(spec.name))
}

/// Installs a Kubernetes binary unless the file there already has the sidecar's digest.
fn install_kubernetes_binary(
    config: &Config,
    spec: &source::ArtifactSpec,
    rootfs: &Path,
    fetcher: &Fetcher,
    arch: &str,
) -> Result<bool, StartError> {
    let resolved = kubernetes_source(config, spec, arch)?;
    let dest = rootfs.join("usr/local/bin").join(spec.name);
    let expected = crate::artifact::expected_sha256(&resolved, fetcher).map_err(artifact(spec.name))?;
    if checksum::sha256_file(&dest).is_ok_and(|have| have == expected) {
        return Ok(false);
    }
    crate::artifact::fetch_verify_install(spec, &resolved, &dest, fetcher, &|_| Ok(()))
        .map_err(artifact(spec.name))?;
    Ok(true)
}

/// Copies the running agent into the machine as the LocalDNS supervisor (see
/// [`supervisor_entry`]) unless the same bytes are there.
pub fn install_supervisor(rootfs: &Path) -> Result<bool, StartError> {
    let me = std::env::current_exe().map_err(|source| StartError::Io {
        action: "find the running agent binary",
        path: "/proc/self/exe".into(),
        source,
    })?;
    let dest = rootfs.join(SUPERVISOR_BINARY.trim_start_matches('/'));
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| StartError::Io { action, path, source }
    };
    let want = checksum::sha256_file(&me).map_err(io("hash", &me))?;
    if checksum::sha256_file(&dest).is_ok_and(|have| have == want) {
        return Ok(false);
    }
    let bytes = std::fs::read(&me).map_err(io("read", &me))?;
    crate::files::write_atomic(&dest, &bytes, 0o755).map_err(io("write", &dest))?;
    debug_assert!(supervisor_entry::invoked_as_supervisor(SUPERVISOR_BINARY));
    Ok(true)
}

/// Where each archive of `ContainerImages` lives in the machine, in config order (nothing is
/// fetched: a repave imports what its preparing phase installed).
pub fn image_archives(config: &Config) -> Result<Vec<ImageArchive>, StartError> {
    let arch = source::host_arch().map_err(artifact("host"))?;
    config
        .container_images
        .iter()
        .enumerate()
        .map(|(i, image)| {
            let request = pinned::PinnedRequest::container_image(
                i,
                &image.reference,
                image.url.as_deref(),
                image.sha256.as_deref(),
                arch,
            );
            let what = format!("{} ({})", request.field, image.reference);
            let name = request.file_name().map_err(artifact(&what))?;
            Ok(ImageArchive {
                reference: image.reference.clone(),
                local_path: format!("{IMAGES_DIR}/{name}"),
            })
        })
        .collect()
}

/// Installs the archives of `ContainerImages` into the machine unless already there with the
/// pinned digest; returns them in config order.
fn install_images(
    config: &Config,
    rootfs: &Path,
    fetcher: &Fetcher,
    arch: &str,
    p: &dyn Progress,
) -> Result<Vec<ImageArchive>, StartError> {
    let bundle = bundle(config)?;
    let mut out = Vec::new();
    for (i, image) in config.container_images.iter().enumerate() {
        let request = pinned::PinnedRequest::container_image(
            i,
            &image.reference,
            image.url.as_deref(),
            image.sha256.as_deref(),
            arch,
        );
        let what = format!("{} ({})", request.field, image.reference);
        let name = request.file_name().map_err(artifact(&what))?;
        let local_path = format!("{IMAGES_DIR}/{name}");
        let dest = rootfs.join(local_path.trim_start_matches('/'));
        let resolved = request
            .resolve(bundle.as_deref(), arch)
            .map_err(artifact(&what))?;
        let expected = crate::artifact::expected_sha256(&resolved, fetcher).map_err(artifact(&what))?;
        if !checksum::sha256_file(&dest).is_ok_and(|have| have == expected) {
            pinned::install_data_file(&image.reference, &resolved, &dest, 0o644, fetcher)
                .map_err(artifact(&what))?;
            p.line(&format!(
                "installed image archive {local_path} ({})",
                image.reference
            ));
        }
        out.push(ImageArchive {
            reference: image.reference.clone(),
            local_path,
        });
    }
    Ok(out)
}

/// The rootfs from `MachineImage`, replaced only when `ours` (an install this agent recorded).
pub fn install_rootfs(
    config: &Config,
    rootfs: &Path,
    ours: bool,
    fetcher: &Fetcher,
) -> Result<bool, StartError> {
    let image = config.machine_image.as_ref().ok_or_else(|| {
        StartError::Plan(super::plan::PlanError::Field {
            field: "MachineImage".into(),
            reason: "is required by `start` (URL and SHA256 of the machine rootfs tarball)".into(),
        })
    })?;
    let arch = source::host_arch().map_err(artifact("MachineImage"))?;
    let request = pinned::PinnedRequest::machine_image(&image.url, &image.sha256);
    let resolved = request
        .resolve(bundle(config)?.as_deref(), arch)
        .map_err(artifact("MachineImage"))?;
    let (_, changed) =
        rootfs_artifact::install(&resolved, rootfs, ours, fetcher).map_err(artifact("MachineImage"))?;
    Ok(changed)
}

/// Everything of this stage after the rootfs itself. Returns the image archives and whether a
/// host unit file changed (systemd must reload).
pub fn populate(
    config: &Config,
    rendered: &Rendered,
    rootfs: &Path,
    root: &Path,
    fetcher: &Fetcher,
    p: &dyn Progress,
) -> Result<(Vec<ImageArchive>, bool), StartError> {
    let arch = source::host_arch().map_err(artifact("host"))?;
    for spec in [&KUBELET, &KUBECTL] {
        if install_kubernetes_binary(config, spec, rootfs, fetcher, arch)? {
            p.line(&format!("installed {} in the machine", spec.name));
        }
    }
    if config.local_dns.is_some() {
        let installed =
            coredns::install(&config.coredns_request(), rootfs, fetcher).map_err(artifact("CoreDNS"))?;
        p.line(&format!("installed CoreDNS {} in the machine", installed.version));
        if install_supervisor(rootfs)? {
            p.line("installed the LocalDNS supervisor in the machine");
        }
    }
    let images = install_images(config, rootfs, fetcher, arch, p)?;
    let written = write_changed(root, rendered, |p| {
        p != Path::new(SYSCTL_FILE) && p != Path::new(MODULES_FILE)
    })?;
    for path in &written {
        p.line(&format!("wrote {}", path.display()));
    }
    let host_units_changed = written.iter().any(|p| p.starts_with("/etc/systemd/system"));
    Ok((images, host_units_changed))
}
