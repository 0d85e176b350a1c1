//! Stage `preparing-rootfs`: the machine's rootfs, the node binaries (kubelet, kubectl, CoreDNS,
//! the LocalDNS supervisor), the container image archives and every file of the node, all
//! through `crate::artifact` (sources, retries, checksums, atomic installs, offline bundles).

use std::path::{Path, PathBuf};

use super::StartError;
use super::error::artifact;
use super::files::write_changed;
use crate::artifact::source::{self, KUBECTL, KUBELET, Resolved};
use crate::artifact::{Fetcher, checksum, coredns, offline, pinned, rootfs as rootfs_artifact};
use crate::files::beneath::{Beneath, beneath};
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
    let download = config.downloads.kubernetes.download();
    let resolved = match bundle(config)? {
        Some(bundle) => offline::resolve_offline(spec, &bundle, wanted.as_deref(), arch)
            .map(|r| source::with_pin(r, download.pinned(spec.name))),
        None => {
            let fallback = config.cluster.version.as_ref().map(|v| v.as_str().to_owned());
            source::resolve_online(spec, Some(&download), fallback.as_deref(), arch)
        }
    };
    resolved.map_err(artifact(spec.name))
}

/// A node binary in the machine: its path inside the machine and its SHA-256, as installed or
/// found (the manifest records it; knowing it from the install spares hashing it again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledBinary {
    pub path: String,
    pub sha256: String,
    /// False when the same bytes were already there.
    pub changed: bool,
}

/// What `populate` left in the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Populated {
    /// The image archives, in config order.
    pub images: Vec<ImageArchive>,
    /// Whether a host unit file changed (systemd must reload).
    pub host_units_changed: bool,
    /// kubelet, kubectl and, with LocalDNS, CoreDNS (and its install record) and the supervisor.
    pub binaries: Vec<InstalledBinary>,
}

/// The file at `inside` (as seen in the machine) reached beneath `rootfs` (`files::beneath`):
/// refused when a link on the way leads out of the machine.
fn in_machine(rootfs: &Path, inside: &str) -> Result<Beneath, StartError> {
    beneath(rootfs, Path::new(inside)).map_err(|source| StartError::Io {
        action: "reach",
        path: rootfs.join(inside.trim_start_matches('/')),
        source,
    })
}

/// Installs a Kubernetes binary unless the file there already has the sidecar's digest.
fn install_kubernetes_binary(
    config: &Config,
    spec: &source::ArtifactSpec,
    rootfs: &Path,
    fetcher: &Fetcher,
    arch: &str,
) -> Result<InstalledBinary, StartError> {
    let path = format!("/usr/local/bin/{}", spec.name);
    let resolved = kubernetes_source(config, spec, arch)?;
    let held = in_machine(rootfs, &path)?;
    let dest = held.path();
    let expected = crate::artifact::expected_sha256(&resolved, fetcher).map_err(artifact(spec.name))?;
    let changed = !checksum::sha256_file(&dest).is_ok_and(|have| have == expected);
    if changed {
        crate::artifact::fetch_verify_install(spec, &resolved, &dest, fetcher, &|_| Ok(()))
            .inspect_err(|_| held.remove_made_dirs())
            .map_err(artifact(spec.name))?;
    }
    Ok(InstalledBinary {
        path,
        sha256: expected,
        changed,
    })
}

/// Copies the running agent into the machine as the LocalDNS supervisor (see
/// [`supervisor_entry`]) unless the same bytes are there (compared, not hashed: hashing the
/// ~50 MB binary costs a second or more under emulation); says whether it wrote it.
pub fn replace_supervisor(rootfs: &Path) -> Result<bool, StartError> {
    Ok(copy_supervisor(rootfs)?.0)
}

/// [`replace_supervisor`], with the binary's digest for the manifest.
pub fn install_supervisor(rootfs: &Path) -> Result<InstalledBinary, StartError> {
    let (changed, bytes) = copy_supervisor(rootfs)?;
    Ok(InstalledBinary {
        sha256: checksum::sha256_bytes(&bytes),
        path: SUPERVISOR_BINARY.to_owned(),
        changed,
    })
}

/// Whether the supervisor was written, and the agent's bytes.
fn copy_supervisor(rootfs: &Path) -> Result<(bool, Vec<u8>), StartError> {
    let me = std::env::current_exe().map_err(|source| StartError::Io {
        action: "find the running agent binary",
        path: "/proc/self/exe".into(),
        source,
    })?;
    let held = in_machine(rootfs, SUPERVISOR_BINARY)?;
    let dest = held.path();
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| StartError::Io { action, path, source }
    };
    let bytes = std::fs::read(&me).map_err(io("read", &me))?;
    let changed = !same_bytes(&dest, &bytes);
    if changed {
        crate::files::write_atomic(&dest, &bytes, 0o755).map_err(io("write", held.shown()))?;
    }
    debug_assert!(supervisor_entry::invoked_as_supervisor(SUPERVISOR_BINARY));
    Ok((changed, bytes))
}

/// True when `path` is a file holding exactly `bytes` (its size is checked first).
fn same_bytes(path: &Path, bytes: &[u8]) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == bytes.len() as u64)
        && std::fs::read(path).is_ok_and(|have| have == bytes)
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
        let held = in_machine(rootfs, &local_path)?;
        let dest = held.path();
        let resolved = request
            .resolve(bundle.as_deref(), arch)
            .map_err(artifact(&what))?;
        let expected = crate::artifact::expected_sha256(&resolved, fetcher).map_err(artifact(&what))?;
        if !checksum::sha256_file(&dest).is_ok_and(|have| have == expected) {
            pinned::install_data_file(&image.reference, &resolved, &dest, 0o644, fetcher)
                .inspect_err(|_| held.remove_made_dirs())
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

/// Everything of this stage after the rootfs itself.
pub fn populate(
    config: &Config,
    rendered: &Rendered,
    rootfs: &Path,
    root: &Path,
    fetcher: &Fetcher,
    p: &dyn Progress,
) -> Result<Populated, StartError> {
    let arch = source::host_arch().map_err(artifact("host"))?;
    let mut binaries = Vec::new();
    for spec in [&KUBELET, &KUBECTL] {
        let installed = install_kubernetes_binary(config, spec, rootfs, fetcher, arch)?;
        if installed.changed {
            p.line(&format!("installed {} in the machine", spec.name));
        }
        binaries.push(installed);
    }
    if config.local_dns.is_some() {
        let coredns =
            coredns::install(&config.coredns_request(), rootfs, fetcher).map_err(artifact("CoreDNS"))?;
        if coredns.changed {
            p.line(&format!(
                "installed CoreDNS {} in the machine",
                coredns.installed.version
            ));
        }
        binaries.push(InstalledBinary {
            path: crate::paths::COREDNS_BINARY.to_owned(),
            sha256: coredns.installed.sha256,
            changed: coredns.changed,
        });
        binaries.push(InstalledBinary {
            path: crate::paths::COREDNS_INSTALL_RECORD.to_owned(),
            sha256: checksum::sha256_bytes(&coredns.record),
            changed: coredns.changed,
        });
        let supervisor = install_supervisor(rootfs)?;
        if supervisor.changed {
            p.line("installed the LocalDNS supervisor in the machine");
        }
        binaries.push(supervisor);
    }
    let images = install_images(config, rootfs, fetcher, arch, p)?;
    let written = write_changed(root, rendered, |p| {
        p != Path::new(SYSCTL_FILE) && p != Path::new(MODULES_FILE)
    })?;
    for path in &written {
        p.line(&format!("wrote {}", path.display()));
    }
    Ok(Populated {
        images,
        host_units_changed: written.iter().any(|p| p.starts_with("/etc/systemd/system")),
        binaries,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn supervisor_in(rootfs: &Path) -> PathBuf {
        rootfs.join(SUPERVISOR_BINARY.trim_start_matches('/'))
    }

    #[test]
    fn the_supervisor_is_the_running_binary_with_its_digest_and_is_written_only_when_it_differs() {
        let rootfs = tempfile::tempdir().unwrap();
        let me = std::env::current_exe().unwrap();
        let first = install_supervisor(rootfs.path()).unwrap();
        assert!(first.changed);
        assert_eq!(first.path, SUPERVISOR_BINARY);
        assert_eq!(first.sha256, checksum::sha256_file(&me).unwrap());
        let dest = supervisor_in(rootfs.path());
        assert_eq!(std::fs::read(&dest).unwrap(), std::fs::read(&me).unwrap());
        let inode = std::fs::metadata(&dest).unwrap().ino();

        let again = install_supervisor(rootfs.path()).unwrap();
        assert!(!again.changed, "the same bytes were written again");
        assert_eq!(again.sha256, first.sha256);
        assert!(!replace_supervisor(rootfs.path()).unwrap());
        assert_eq!(std::fs::metadata(&dest).unwrap().ino(), inode);
    }

    #[test]
    fn a_supervisor_of_another_build_is_replaced_also_when_its_size_is_the_same() {
        let rootfs = tempfile::tempdir().unwrap();
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let dest = supervisor_in(rootfs.path());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        let mut other = me.clone();
        *other.last_mut().unwrap() ^= 0xff;
        std::fs::write(&dest, &other).unwrap();
        assert!(replace_supervisor(rootfs.path()).unwrap());
        assert_eq!(std::fs::read(&dest).unwrap(), me);

        std::fs::write(&dest, b"older and shorter").unwrap();
        assert!(install_supervisor(rootfs.path()).unwrap().changed);
        assert_eq!(std::fs::read(&dest).unwrap(), me);
    }
}
