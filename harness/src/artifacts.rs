//! Everything a node needs from the lab, published on the lab's artifact server
//! (`http://192.168.100.1:8080`) in the layouts the agent fetches, and gathered into one
//! offline bundle directory (docs/design.md §4) so `OfflineArtifacts.Source` alone suffices.
//!
//! On the artifact server:
//!
//! | URL path                                  | what                                  | agent config                  |
//! |-------------------------------------------|---------------------------------------|-------------------------------|
//! | `/coredns/v<ver>/coredns_<ver>_linux_amd64.tgz` (+ `.sha256`) | CoreDNS release tarball | `Downloads.CoreDNS.BaseURL` = `<base>/coredns` |
//! | `/kubernetes/v<ver>/bin/linux/amd64/{kubelet,kubectl}` (+ `.sha256`) | node binaries | `Downloads.Kubernetes.BaseURL` = `<base>/kubernetes` |
//! | `/rootfs/rootfs.tar.gz` (+ `.sha256`)     | the nspawn machine rootfs             | `MachineImage{URL,SHA256}`    |
//! | `/container-images/amd64/<name>-<tag>.tar` (+ `.sha256`) | OCI image archives     | `ContainerImages[{Ref,URL,SHA256}]` |
//!
//! The offline bundle (a cache entry of kind `offline-bundle`, hard links into the other
//! entries): `manifest.json` (`versions.{coredns,kubernetes,pause,busybox,kube-proxy}`, plus
//! `machineImage` and `containerImages` naming the files and their sha256),
//! `coredns/v<ver>/bin/linux/amd64/coredns`, `kubernetes/v<ver>/bin/linux/amd64/{kubelet,kubectl}`,
//! `rootfs/rootfs.tar.gz`, `container-images/amd64/<name>-<tag>.tar`, each with its `.sha256`.
//! Nothing in it is a symlink, so it can be shared into a VM as it is (9p) or copied.

use std::fs;
use std::path::{Path, PathBuf};

use agent::config::{ContainerImageConfig, DownloadSource, DownloadsConfig, MachineImageConfig};

use crate::cache::{Cache, CacheError, RecipeKey};
use crate::images::{coredns, kind_node, kubernetes, oci, rootfs};
use crate::lab::{Lab, LabError};
use agent::error_chain::Chain;

/// The cache kind of the offline bundle (its key is computed with the images' keys).
pub use crate::images::prune::BUNDLE_KIND;
/// URL path of the CoreDNS release tree (`Downloads.CoreDNS.BaseURL`).
pub const COREDNS_PATH: &str = "/coredns";
/// URL path of the Kubernetes download tree (`Downloads.Kubernetes.BaseURL`).
pub const KUBERNETES_PATH: &str = "/kubernetes";
/// URL directory of the machine rootfs tarball (and its directory in the bundle).
pub const ROOTFS_PATH: &str = "/rootfs";
/// URL directory of the OCI archives (`/container-images/amd64`, the bundle's layout too).
pub const CONTAINER_IMAGES_PATH: &str = "/container-images";

/// Why the artifacts could not be published.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactsError {
    /// One or more cached builds are missing; the message names the command that builds them.
    #[error("the lab's artifacts are not all built:\n{0}")]
    Missing(String),
    #[error("publishing {url_path} on the lab's artifact server: {source}")]
    Publish {
        url_path: String,
        #[source]
        source: LabError,
    },
    #[error("assembling the offline bundle")]
    Bundle(#[source] CacheError),
}

/// Why the offline bundle could not be laid out (inside [`ArtifactsError::Bundle`]).
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is missing")]
    Missing {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("copying {from} to {to}")]
    Copy {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the bundle's manifest")]
    Manifest(#[source] serde_json::Error),
}

/// What a node config needs from the published artifacts (see `harness::node_config::LabValues`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct LabArtifacts {
    /// `http://192.168.100.1:8080`.
    pub base_url: String,
    /// Without `v` (`1.15.0`).
    pub coredns_version: String,
    /// Without `v` (`1.35.4`).
    pub kubernetes_version: String,
    /// `Downloads`: CoreDNS and Kubernetes base URLs on the artifact server, with their versions.
    pub downloads: DownloadsConfig,
    /// `MachineImage`: the rootfs tarball's URL and sha256.
    pub machine_image: MachineImageConfig,
    /// `ContainerImages`: pause first, then the test image, then kube-proxy.
    pub container_images: Vec<ContainerImageConfig>,
    /// containerd's `sandbox_image` ([`oci::PAUSE_REF`]).
    pub pause_ref: String,
    /// What scenario pods run ([`oci::TEST_IMAGE_REF`], `imagePullPolicy: Never`).
    pub test_image_ref: String,
    /// Every URL path published and the host file or directory behind it.
    pub published: Vec<(String, PathBuf)>,
    offline_bundle: PathBuf,
}

impl LabArtifacts {
    /// The offline bundle on the host: hand it to a VM (share or copy) and put its path
    /// there into `OfflineArtifacts.Source`.
    pub fn offline_bundle_dir(&self) -> &Path {
        &self.offline_bundle
    }

    /// The full URL of a published path.
    pub fn url(&self, url_path: &str) -> String {
        format!("{}{url_path}", self.base_url)
    }
}

/// The cached builds a lab's node needs.
struct Inputs {
    coredns: coredns::CoreDnsArtifact,
    kubernetes: kubernetes::KubernetesArtifact,
    rootfs: rootfs::Rootfs,
    images: oci::OciImages,
    /// The Kind node image's entry, for its kube-proxy archive.
    kind_node: kind_node::KindNodeImage,
}

/// Finds every cached build, or names every missing one with the command that builds it.
fn inputs(cache: &Cache) -> Result<Inputs, ArtifactsError> {
    let coredns = coredns::require(cache);
    let kubernetes = kubernetes::require(cache);
    let rootfs = rootfs::require(cache);
    let images = oci::require(cache);
    let kind_node = kind_node::require(cache);
    match (coredns, kubernetes, rootfs, images, kind_node) {
        (Ok(coredns), Ok(kubernetes), Ok(rootfs), Ok(images), Ok(kind_node)) => Ok(Inputs {
            coredns,
            kubernetes,
            rootfs,
            images,
            kind_node,
        }),
        (coredns, kubernetes, rootfs, images, kind_node) => {
            let missing: Vec<String> = [
                coredns.err(),
                kubernetes.err(),
                rootfs.err(),
                images.err(),
                kind_node.err(),
            ]
            .into_iter()
            .flatten()
            .map(|e| format!("  - {}", Chain(&e)))
            .collect();
            Err(ArtifactsError::Missing(missing.join("\n")))
        }
    }
}

/// Publishes everything a node needs on `lab`'s artifact server and assembles the offline
/// bundle; fails at once, naming the commands to run, when a build is missing from `cache`.
pub fn publish(lab: &Lab, cache: &Cache) -> Result<LabArtifacts, ArtifactsError> {
    let inputs = inputs(cache)?;
    let offline_bundle = offline_bundle(cache, &inputs).map_err(ArtifactsError::Bundle)?;
    let node_images = node_images(&inputs);
    let Inputs {
        coredns,
        kubernetes,
        rootfs,
        images,
        ..
    } = &inputs;
    let base_url = lab.addrs().http_url();
    let mut published = vec![
        (COREDNS_PATH.to_string(), coredns.release_root.clone()),
        (KUBERNETES_PATH.to_string(), kubernetes.release_root.clone()),
    ];
    published.extend(
        pinned_files(rootfs, &node_images)
            .into_iter()
            .map(|(relative, file)| (format!("/{}", relative.display()), file)),
    );
    for (url_path, file) in &published {
        lab.http()
            .publish(url_path, file)
            .map_err(|source| ArtifactsError::Publish {
                url_path: url_path.clone(),
                source,
            })?;
    }
    let url = |path: &str| format!("{base_url}{path}");
    // The artifact server is plain http on the lab's own bridge: each source says so.
    let allow_http = base_url.starts_with("http://").then_some(true);
    let container_images = node_images
        .iter()
        .map(|NodeImage { image, .. }| ContainerImageConfig {
            reference: Some(image.reference.clone()),
            url: Some(url(&format!("/{}", image.file))),
            sha256: Some(image.sha256.clone()),
            allow_http,
        })
        .collect();
    Ok(LabArtifacts {
        downloads: DownloadsConfig {
            kubernetes: Some(DownloadSource {
                base_url: Some(url(KUBERNETES_PATH)),
                version: Some(format!("v{}", kubernetes.version)),
                allow_http,
                ..Default::default()
            }),
            core_dns: Some(DownloadSource {
                base_url: Some(url(COREDNS_PATH)),
                version: Some(coredns.version.clone()),
                allow_http,
                ..Default::default()
            }),
        },
        machine_image: MachineImageConfig {
            url: Some(url(&format!("/{}", rootfs_file(rootfs)))),
            sha256: Some(rootfs.sha256.clone()),
            allow_http,
        },
        container_images,
        pause_ref: images.pause().reference.clone(),
        test_image_ref: images.test_image().reference.clone(),
        coredns_version: coredns.version.clone(),
        kubernetes_version: kubernetes.version.clone(),
        base_url,
        published,
        offline_bundle,
    })
}

/// One key for every artifact [`publish`] would publish now (the cache entries' own keys), so
/// it changes with any of them: what a checkpoint of a joined node depends on.
pub fn published_key(cache: &Cache) -> Result<String, ArtifactsError> {
    Ok(bundle_key(&inputs(cache)?).hex())
}

/// The bundle's key: the keys of everything in it, so it changes with any of them.
fn bundle_key(inputs: &Inputs) -> RecipeKey {
    let entry_key = |dir: &Path| dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
    crate::images::prune::current::bundle_key(
        &entry_key(&inputs.coredns.dir),
        &entry_key(&inputs.kubernetes.dir),
        &entry_key(&inputs.rootfs.dir),
        &entry_key(&inputs.images.dir),
        &entry_key(&inputs.kind_node.dir),
    )
}

/// Assembles (once per set of inputs) the offline bundle from hard links into the cache.
fn offline_bundle(cache: &Cache, inputs: &Inputs) -> Result<PathBuf, CacheError> {
    cache.get_or_build(BUNDLE_KIND, &bundle_key(inputs), |out, _log| {
        Ok(assemble_bundle(inputs, out)?)
    })
}

fn assemble_bundle(inputs: &Inputs, out: &Path) -> Result<(), BundleError> {
    let node_images = node_images(inputs);
    let Inputs {
        coredns,
        kubernetes,
        rootfs,
        ..
    } = inputs;
    let coredns_bin = coredns::ARCH;
    let mut files: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut with_sidecar = |relative: PathBuf, source: PathBuf| {
        files.push((sidecar(&relative), sidecar(&source)));
        files.push((relative, source));
    };
    let spec = agent::artifact::source::COREDNS;
    with_sidecar(
        spec.bundle_path(&coredns.version, coredns_bin),
        coredns.binary.clone(),
    );
    for spec in kubernetes::NODE_BINARIES {
        with_sidecar(
            spec.bundle_path(&kubernetes.version, kubernetes::ARCH),
            kubernetes.offline_binary(&spec),
        );
    }
    files.extend(pinned_files(rootfs, &node_images));
    for (relative, source) in &files {
        let dest = out.join(relative);
        let parent = dest.parent().expect("a path under out has a parent");
        fs::create_dir_all(parent).map_err(|source| BundleError::Io {
            what: "creating",
            path: parent.to_path_buf(),
            source,
        })?;
        link_or_copy(source, &dest)?;
    }
    let version_of = |image: &oci::ManifestImage| oci::tag(&image.reference).to_string();
    let container_images: Vec<_> = node_images
        .iter()
        .map(|NodeImage { image: i, .. }| serde_json::json!({ "Ref": i.reference, "File": i.file, "SHA256": i.sha256 }))
        .collect();
    let manifest = serde_json::json!({
        "versions": {
            "coredns": coredns.version,
            "kubernetes": kubernetes.version,
            "pause": version_of(inputs.images.pause()),
            "busybox": version_of(inputs.images.test_image()),
            "kube-proxy": version_of(&inputs.kind_node.kube_proxy),
        },
        "machineImage": { "File": rootfs_file(rootfs), "SHA256": rootfs.sha256 },
        "containerImages": container_images,
    });
    let path = out.join("manifest.json");
    let text = serde_json::to_string_pretty(&manifest).map_err(BundleError::Manifest)?;
    fs::write(&path, text + "\n").map_err(|source| BundleError::Io {
        what: "writing",
        path,
        source,
    })
}

/// One image a node gets, and its archive on the host.
struct NodeImage<'a> {
    image: &'a oci::ManifestImage,
    archive: PathBuf,
}

/// The images a node gets (`ContainerImages`): pause first, then the test image, then
/// kube-proxy (the Kind cluster's kube-proxy DaemonSet runs it on every node).
fn node_images(inputs: &Inputs) -> Vec<NodeImage<'_>> {
    let oci = &inputs.images;
    let kind_node = &inputs.kind_node;
    vec![
        NodeImage {
            image: oci.pause(),
            archive: oci.path_of(oci.pause()),
        },
        NodeImage {
            image: oci.test_image(),
            archive: oci.path_of(oci.test_image()),
        },
        NodeImage {
            image: &kind_node.kube_proxy,
            archive: kind_node.path_of(&kind_node.kube_proxy),
        },
    ]
}

/// `rootfs/<tarball>`: the rootfs tarball's place on the server and in the bundle.
fn rootfs_file(rootfs: &rootfs::Rootfs) -> String {
    format!(
        "{}/{}",
        ROOTFS_PATH.trim_start_matches('/'),
        file_name(&rootfs.tarball)
    )
}

/// The two trees laid out alike on the artifact server and in the offline bundle (docs/design.md §4):
/// `rootfs/<tarball>` and `container-images/<arch>/<name>-<tag>.tar`, each with its `.sha256`,
/// as (relative path, host file).
fn pinned_files(rootfs: &rootfs::Rootfs, images: &[NodeImage]) -> Vec<(PathBuf, PathBuf)> {
    let mut files = vec![(PathBuf::from(rootfs_file(rootfs)), rootfs.tarball.clone())];
    files.extend(
        images
            .iter()
            .map(|NodeImage { image, archive }| (PathBuf::from(&image.file), archive.clone())),
    );
    files
        .into_iter()
        .flat_map(|(relative, file)| {
            let sums = (sidecar(&relative), sidecar(&file));
            [(relative, file), sums]
        })
        .collect()
}

/// A hard link (the bundle lives in the same cache), else a copy.
fn link_or_copy(source: &Path, dest: &Path) -> Result<(), BundleError> {
    let source = fs::canonicalize(source).map_err(|e| BundleError::Missing {
        path: source.to_path_buf(),
        source: e,
    })?;
    if fs::hard_link(&source, dest).is_err() {
        fs::copy(&source, dest).map_err(|e| BundleError::Copy {
            from: source.clone(),
            to: dest.to_path_buf(),
            source: e,
        })?;
    }
    Ok(())
}

fn sidecar(path: &Path) -> PathBuf {
    let mut os = path.as_os_str().to_owned();
    os.push(".sha256");
    PathBuf::from(os)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_builds_are_all_named_with_the_command_that_builds_them() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path().to_path_buf()).unwrap();
        let Err(err) = inputs(&cache) else {
            panic!("an empty cache has every input")
        };
        let text = err.to_string();
        for what in [
            "CoreDNS",
            "Kubernetes",
            "machine rootfs",
            "OCI images",
            "Kind node image",
        ] {
            assert!(text.contains(what), "{what} not named in: {text}");
        }
        assert!(text.contains("harness images build"), "{text}");
    }
}
