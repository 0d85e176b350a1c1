//! The lab's Kind node image, built here because no image registry is reachable: Debian trixie
//! from `images/kind-node/` (mmdebstrap) with Kind's base files, the pinned kubeadm, kubelet and
//! kubectl, and the container images `kubeadm init` runs, written from the binaries the lab
//! builds.
//!
//! Layout of a built entry (`<cache>/kind-node/<key>/`): `node-image.tar` (the node's root,
//! loaded into the engine with `import`), `images.json` (the container images inside, with
//! their sources), `packages.txt` (`dpkg -l`), `image.json`, and
//! `container-images/amd64/kube-proxy-<tag>.tar` (+ `.sha256`): the same kube-proxy archive as
//! inside, which the lab publishes for the VMs (their kube-proxy DaemonSet pods run it).
//!
//! In the node:
//! * `/usr/local/bin/entrypoint`, `/kind/bin/*`, the containerd and kubelet units: Kind's base
//!   files (`kind_tool`), with Debian's containerd, runc and CNI plugins at Kind's paths;
//! * `/usr/bin/{kubeadm,kubelet,kubectl}`, `/kind/version` (the Kubernetes version Kind reads);
//! * `/kind/images/*.tar`: each image `kubeadm config images list` names, as an OCI archive,
//!   imported into containerd's `k8s.io` namespace before the kubelet first starts
//!   ([`IMPORT_UNIT`]); CoreDNS is the cluster build of the lab's CoreDNS under kubeadm's tag;
//! * `/etc/cni/net.d/10-unbounded-bridge.conflist`: the agent's bridge network
//!   (`agent::render::cni`) on [`NODE_POD_CIDR`] (the lab has no CNI DaemonSet: Kind's kindnetd
//!   is not on the Go module proxy).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent::render::cni;

use super::coredns::{self, CoreDnsArtifact};
use super::entry::{read_json, require_built, write_json};
use super::error::{ImageError, io_err};
use super::kind_tool::{self, KindTool};
use super::kubernetes::{self, KubernetesArtifact};
use super::mmdebstrap::{self, MANIFEST, Recipe};
use super::oci::{self, OciImages};
use super::oci_layout::{ImageSpec, LayerEntry, WrittenImage, write_archive};
use crate::cache::{Cache, RecipeKey};
use crate::progress::{Step, run_logged};

/// The cache kind of the Kind node image.
pub const KIND: &str = "kind-node";
/// The repository the image is loaded as into the engine (`localhost/`: Kind uses it as is).
pub const IMAGE_REPOSITORY: &str = "localhost/unbounded-kind-node";
/// The pod CIDR of the Kind node's own pods (CoreDNS): outside every lab VM's `10.244.<k>.0/24`.
pub const NODE_POD_CIDR: &str = "10.244.255.0/24";
/// The unit that imports `/kind/images/*.tar` into containerd before the kubelet starts.
pub const IMPORT_UNIT: &str = "unbounded-lab-import-images.service";
/// The node image's tarball, in the entry.
pub const TARBALL: &str = "node-image.tar";
/// Bump when this file changes what a build produces.
const RECIPE_VERSION: &str = "kind-node-5";
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The parts the node image is made of, each a cache entry of its own.
pub struct Parts {
    pub kubernetes: KubernetesArtifact,
    pub coredns: CoreDnsArtifact,
    pub oci: OciImages,
    pub kind: KindTool,
}

impl Parts {
    /// Builds (or finds) every part.
    pub fn build(cache: &Cache) -> Result<Parts, ImageError> {
        Ok(Parts {
            kubernetes: kubernetes::build(cache)?,
            coredns: coredns::build(cache)?,
            oci: oci::build(cache)?,
            kind: kind_tool::build(cache)?,
        })
    }

    /// Finds every part; fails naming the command that builds a missing one.
    pub fn require(cache: &Cache) -> Result<Parts, ImageError> {
        Ok(Parts {
            kubernetes: kubernetes::require(cache)?,
            coredns: coredns::require(cache)?,
            oci: oci::require(cache)?,
            kind: kind_tool::require(cache)?,
        })
    }
}

/// A built Kind node image.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct KindNodeImage {
    /// The cache entry's directory.
    #[serde(skip)]
    pub dir: PathBuf,
    /// `node-image.tar`.
    #[serde(skip)]
    pub tarball: PathBuf,
    /// What the engine knows it as: `localhost/unbounded-kind-node:<key>`.
    pub reference: String,
    /// `v1.35.4`.
    pub kubernetes_version: String,
    /// The container images inside (`registry.k8s.io/kube-apiserver:v1.35.4`, ...).
    pub images: Vec<NodeImageContent>,
    /// The kube-proxy image's archive in the entry, for the lab's VMs (`ContainerImages`).
    pub kube_proxy: oci::ManifestImage,
}

impl KindNodeImage {
    /// Where an archive of the entry (`kube_proxy.file`) is.
    pub fn path_of(&self, image: &oci::ManifestImage) -> PathBuf {
        self.dir.join(&image.file)
    }
}

/// One container image inside the node image.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeImageContent {
    pub reference: String,
    /// Its archive in the node (`/kind/images/<name>.tar`).
    pub path: String,
    /// What it was made from.
    pub source: String,
}

fn recipe() -> Recipe {
    Recipe::new("kind-node", RECIPE_VERSION)
}

/// The cache key: the recipe directory and every part's key.
pub fn key() -> Result<RecipeKey, ImageError> {
    Ok(recipe()
        .key()?
        .with("kubernetes", kubernetes::key().hex())
        .with("coredns", coredns::key().hex())
        .with("oci", oci::key()?.hex())
        .with("kind", kind_tool::key().hex()))
}

/// Builds the node image (and its parts) unless cached; returns it.
pub fn build(cache: &Cache) -> Result<KindNodeImage, ImageError> {
    let parts = Parts::build(cache)?;
    let key = key()?;
    let dir = cache.get_or_build(KIND, &key, |out, log| Ok(build_into(&parts, &key, out, log)?))?;
    load(&dir)
}

/// The cached node image; fails at once, naming `harness images build`, when missing.
pub fn require(cache: &Cache) -> Result<KindNodeImage, ImageError> {
    load(&require_built(
        cache,
        KIND,
        &key()?,
        "Kind node image",
        "kind-node",
    )?)
}

/// Reads a built entry's `image.json`.
pub fn load(dir: &Path) -> Result<KindNodeImage, ImageError> {
    let mut image: KindNodeImage = read_json(&dir.join("image.json"))?;
    image.dir = dir.to_path_buf();
    image.tarball = dir.join(TARBALL);
    Ok(image)
}

fn build_into(parts: &Parts, key: &RecipeKey, out: &Path, log: &Path) -> Result<(), ImageError> {
    let recipe = recipe();
    let root = out.join("rootfs");
    let step = Step::start(format!("Kind node image: mmdebstrap {}", mmdebstrap::SUITE));
    recipe.mmdebstrap(&root, &out.join(MANIFEST), &["--skip=output/dev"], log, &step)?;
    step.finish();

    let step = Step::start("Kind node image: Kind's base files, Kubernetes, container images");
    let version = format!("v{}", parts.kubernetes.version);
    add_base_files(&root, parts, &version, log, &step)?;
    let (images, kube_proxy) = add_container_images(&root, parts, &version)?;
    let source = images
        .iter()
        .find(|i| image_name(&i.reference) == "kube-proxy")
        .map(|i| i.source.clone())
        .unwrap_or_default();
    let kube_proxy = keep_kube_proxy(out, kube_proxy, &source)?;
    run_logged(
        Command::new("chroot").arg(&root).args([
            "systemctl",
            "enable",
            "containerd.service",
            "kubelet.service",
            "undo-mount-hacks.service",
            IMPORT_UNIT,
        ]),
        log,
        &step,
    )?;
    step.finish();

    let step = Step::start("Kind node image: tar");
    run_logged(
        Command::new("tar")
            .args(["--sort=name", "--numeric-owner", "--xattrs"])
            .arg(format!("--mtime=@{}", mmdebstrap::SOURCE_DATE_EPOCH))
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(out.join(TARBALL))
            .arg("."),
        log,
        &step,
    )?;
    fs::remove_dir_all(&root).map_err(io_err("removing", &root))?;
    step.finish();

    let image = KindNodeImage {
        dir: out.to_path_buf(),
        tarball: out.join(TARBALL),
        reference: format!("{IMAGE_REPOSITORY}:{}", &key.hex()[..16]),
        kubernetes_version: version,
        images,
        kube_proxy,
    };
    write_json(&out.join("image.json"), &image)
}

/// Kind's base files, the Kubernetes node binaries, `/kind/version`, containerd's configuration
/// for Debian's containerd and the lab's pause image, the bridge network, the import unit.
fn add_base_files(
    root: &Path,
    parts: &Parts,
    version: &str,
    log: &Path,
    step: &Step,
) -> Result<(), ImageError> {
    let mut base = parts.kind.base_files.as_os_str().to_owned();
    base.push("/.");
    run_logged(Command::new("cp").arg("-R").arg(base).arg(root), log, step)?;
    for name in ["kubeadm", "kubelet", "kubectl"] {
        let to = root.join("usr/bin").join(name);
        fs::copy(parts.kubernetes.binary(name), &to).map_err(io_err("copying to", &to))?;
    }
    write(root, "kind/version", &format!("{version}\n"))?;

    let config_path = root.join("etc/containerd/config.toml");
    let config = fs::read_to_string(&config_path).map_err(io_err("reading", &config_path))?;
    write(root, "etc/containerd/config.toml", &containerd_config(&config)?)?;
    let spec = agent::exec::run_stdout(Command::new("chroot").arg(root).args(["ctr", "oci", "spec"]))?;
    write(root, "etc/containerd/cri-base.json", &cri_base_spec(&spec)?)?;

    // The pod network of the agent's nodes (bridge `cni0`, host-local) on the Kind node's CIDR.
    write(
        root,
        cni::CONFLIST.trim_start_matches('/'),
        &cni::bridge_conflist(NODE_POD_CIDR),
    )?;
    write(
        root,
        &format!("etc/systemd/system/{IMPORT_UNIT}"),
        IMPORT_UNIT_TEXT,
    )?;
    Ok(())
}

/// Kind's containerd configuration with the lab's pause image as the sandbox image, and
/// containers' `oom_score_adj` kept at or above containerd's own: a node container without
/// `CAP_SYS_RESOURCE` (Podman on this project's machines) cannot lower it, and runc then fails
/// every pod sandbox ("can't get final child's PID from pipe").
pub fn containerd_config(kinds: &str) -> Result<String, ImageError> {
    let mut replaced = [false, false];
    let text: Vec<String> = kinds
        .lines()
        .map(|line| {
            let key = line.trim_start();
            if key.starts_with("sandbox_image") {
                replaced[0] = true;
                format!("  sandbox_image = \"{}\"", oci::PAUSE_REF)
            } else if key.starts_with("restrict_oom_score_adj") {
                replaced[1] = true;
                "  restrict_oom_score_adj = true".to_string()
            } else {
                line.to_string()
            }
        })
        .collect();
    for (done, key) in replaced
        .into_iter()
        .zip(["sandbox_image", "restrict_oom_score_adj"])
    {
        if !done {
            return Err(ImageError::KindNode(format!(
                "Kind's etc/containerd/config.toml sets no {key}"
            )));
        }
    }
    Ok(text.join("\n") + "\n")
}

/// `ctr oci spec` as Kind's base image edits it: its product-files hook added, rlimits removed.
pub fn cri_base_spec(ctr_spec: &str) -> Result<String, ImageError> {
    let mut spec: serde_json::Value = serde_json::from_str(ctr_spec).map_err(|source| ImageError::Json {
        what: "parsing `ctr oci spec`".into(),
        source,
    })?;
    let hooks = spec["hooks"]["createContainer"].take();
    let mut hooks = hooks.as_array().cloned().unwrap_or_default();
    hooks.push(serde_json::json!({"path": "/kind/bin/mount-product-files.sh"}));
    spec["hooks"]["createContainer"] = hooks.into();
    if let Some(process) = spec["process"].as_object_mut() {
        process.remove("rlimits");
    }
    serde_json::to_string_pretty(&spec).map_err(|source| ImageError::Json {
        what: "writing cri-base.json".into(),
        source,
    })
}

const IMPORT_UNIT_TEXT: &str = "\
# The lab's Kind node image: the container images kubeadm's pods run, imported once per node
# (no registry is reachable), before the kubelet starts.
[Unit]
Description=Import the lab's container images into containerd
Requires=containerd.service
After=containerd.service
Before=kubelet.service
ConditionPathExists=!/var/lib/unbounded-lab/images-imported

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -ec 'for f in /kind/images/*.tar; do ctr -n k8s.io images import \"$f\"; done; mkdir -p /var/lib/unbounded-lab; touch /var/lib/unbounded-lab/images-imported'

[Install]
WantedBy=multi-user.target
RequiredBy=kubelet.service
";

/// Writes the archive of every image `kubeadm config images list` names into `/kind/images/`;
/// returns them and kube-proxy's archive as written.
fn add_container_images(
    root: &Path,
    parts: &Parts,
    version: &str,
) -> Result<(Vec<NodeImageContent>, Option<WrittenImage>), ImageError> {
    let listed = agent::exec::run_stdout(Command::new(parts.kubernetes.binary("kubeadm")).args([
        "config",
        "images",
        "list",
        "--kubernetes-version",
        version,
    ]))?;
    let dir = root.join("kind/images");
    fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
    let mtime: u64 = mmdebstrap::SOURCE_DATE_EPOCH.parse().unwrap_or_default();
    let mut contents = Vec::new();
    let mut kube_proxy = None;
    for reference in listed.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let name = image_name(reference);
        let path = format!("kind/images/{name}.tar");
        let source = match name {
            "pause" => {
                let pause = parts.oci.pause();
                if pause.reference != reference {
                    return Err(ImageError::KindNode(format!(
                        "kubeadm {version} runs {reference}, the lab builds {}",
                        pause.reference
                    )));
                }
                let from = parts.oci.path_of(pause);
                let to = root.join(&path);
                fs::copy(&from, &to).map_err(io_err("copying to", &to))?;
                format!("the lab's pause image ({})", from.display())
            }
            _ => {
                let (spec, source) = component_image(root, parts, reference, name, mtime)?;
                let written = write_archive(&spec, &root.join(&path))?;
                if name == "kube-proxy" {
                    kube_proxy = Some(written);
                }
                source
            }
        };
        contents.push(NodeImageContent {
            reference: reference.to_string(),
            path: format!("/{path}"),
            source,
        });
    }
    Ok((contents, kube_proxy))
}

/// Copies the node's kube-proxy archive to `container-images/<arch>/kube-proxy-<tag>.tar` of the
/// entry, with its `.sha256`, for the lab's VMs.
fn keep_kube_proxy(
    out: &Path,
    written: Option<WrittenImage>,
    source: &str,
) -> Result<oci::ManifestImage, ImageError> {
    let written = written.ok_or_else(|| ImageError::KindNode("kubeadm lists no kube-proxy image".into()))?;
    let file = format!(
        "container-images/{}/kube-proxy-{}.tar",
        oci::ARCH,
        oci::tag(&written.reference)
    );
    let to = out.join(&file);
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    }
    fs::copy(&written.path, &to).map_err(io_err("copying to", &to))?;
    super::entry::write_sidecar_with(&to, &written.sha256)?;
    Ok(oci::manifest_image(
        "kube-proxy",
        file,
        written,
        source.to_string(),
    ))
}

/// The last path element of a ref without its tag: `coredns` of
/// `registry.k8s.io/coredns/coredns:v1.12.1`.
pub fn image_name(reference: &str) -> &str {
    let last = reference.rsplit('/').next().unwrap_or(reference);
    last.split(':').next().unwrap_or(last)
}

/// The image of one control-plane component, from the binary the lab builds.
fn component_image(
    root: &Path,
    parts: &Parts,
    reference: &str,
    name: &str,
    mtime: u64,
) -> Result<(ImageSpec, String), ImageError> {
    let read = |path: &Path| fs::read(path).map_err(io_err("reading", path));
    let in_local_bin = |binary: &Path| -> Result<Vec<LayerEntry>, ImageError> {
        Ok(vec![
            LayerEntry::dir("usr", 0o755),
            LayerEntry::dir("usr/local", 0o755),
            LayerEntry::dir("usr/local/bin", 0o755),
            LayerEntry::file(&format!("usr/local/bin/{name}"), 0o755, read(binary)?),
            LayerEntry::dir("tmp", 0o1777),
        ])
    };
    let mut spec = ImageSpec {
        reference: reference.to_string(),
        env: vec![PATH_ENV.into()],
        mtime,
        ..ImageSpec::default()
    };
    let source = match name {
        "kube-apiserver" | "kube-controller-manager" | "kube-scheduler" | "etcd" => {
            let binary = parts.kubernetes.binary(name);
            spec.entries = in_local_bin(&binary)?;
            spec.entrypoint = Some(vec![format!("/usr/local/bin/{name}")]);
            format!("/usr/local/bin/{name}: {}", binary.display())
        }
        "kube-proxy" => {
            let binary = parts.kubernetes.binary(name);
            spec.entries = in_local_bin(&binary)?;
            spec.entries.extend(nft_closure(root)?);
            spec.entries.extend(protocol_names(root)?);
            spec.entrypoint = Some(vec![format!("/usr/local/bin/{name}")]);
            format!(
                "/usr/local/bin/kube-proxy: {}; /usr/sbin/nft and its libraries, /etc/protocols and \
                 /etc/services from the node's Debian",
                binary.display()
            )
        }
        "coredns" => {
            let binary = &parts.coredns.cluster_binary;
            spec.entries = vec![
                LayerEntry::file("coredns", 0o755, read(binary)?),
                LayerEntry::dir("tmp", 0o1777),
            ];
            spec.entrypoint = Some(vec!["/coredns".into()]);
            format!(
                "/coredns: the lab's cluster CoreDNS v{} ({}) under kubeadm's tag",
                parts.coredns.version,
                binary.display()
            )
        }
        other => {
            return Err(ImageError::KindNode(format!(
                "kubeadm lists {reference} ({other}), which no part of the lab builds"
            )));
        }
    };
    Ok((spec, source))
}

/// `/usr/sbin/nft` of the node's root and every library it loads (`ldd` in the root), as layer
/// entries: kube-proxy's nftables mode runs `nft`.
fn nft_closure(root: &Path) -> Result<Vec<LayerEntry>, ImageError> {
    let ldd = agent::exec::run_stdout(Command::new("chroot").arg(root).args(["ldd", "/usr/sbin/nft"]))?;
    let mut files = vec!["/usr/sbin/nft".to_string()];
    files.extend(ldd_paths(&ldd));
    let mut entries = Vec::new();
    let mut dirs = std::collections::BTreeSet::new();
    for file in &files {
        let rel = file.trim_start_matches('/');
        let mut parent = Path::new(rel).parent();
        while let Some(dir) = parent.filter(|d| !d.as_os_str().is_empty()) {
            dirs.insert(dir.to_string_lossy().into_owned());
            parent = dir.parent();
        }
        // Read through symlinks: the layer holds each file at the path the loader asks for.
        let host = root.join(rel);
        let data = fs::read(&host).map_err(io_err("reading", &host))?;
        entries.push(LayerEntry::file(rel, 0o755, data));
    }
    let mut all: Vec<LayerEntry> = dirs.iter().map(|d| LayerEntry::dir(d, 0o755)).collect();
    all.append(&mut entries);
    Ok(all)
}

/// `/etc/protocols` and `/etc/services` of the node's root, as layer entries. Without them `nft
/// --json` lists a map's `inet_proto` as a number (`6`) where kube-proxy writes a name (`tcp`):
/// knftables then reads every existing `service-ips` element as a stranger, and a kube-proxy
/// started over its own table (after the node's machine restarts) adds each element and deletes
/// it again in one transaction, leaving every ClusterIP rejected until its hourly full sync.
fn protocol_names(root: &Path) -> Result<Vec<LayerEntry>, ImageError> {
    let mut entries = vec![LayerEntry::dir("etc", 0o755)];
    for name in ["etc/protocols", "etc/services"] {
        let host = root.join(name);
        entries.push(LayerEntry::file(
            name,
            0o644,
            fs::read(&host).map_err(io_err("reading", &host))?,
        ));
    }
    Ok(entries)
}

/// The absolute paths `ldd` prints (`libx.so => /lib/.../libx.so (0x...)`, `/lib64/ld-... (0x...)`).
pub fn ldd_paths(ldd: &str) -> Vec<String> {
    ldd.lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.trim(),
                None => line,
            };
            let path = path.split_whitespace().next()?;
            path.starts_with('/').then(|| path.to_string())
        })
        .collect()
}

fn write(root: &Path, rel: &str, text: &str) -> Result<(), ImageError> {
    let path = root.join(rel);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    }
    fs::write(&path, text).map_err(io_err("writing", &path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_image_becomes_the_labs_pause_oom_scores_are_restricted_and_a_config_without_either_is_refused()
     {
        let kinds = concat!(
            "[plugins.\"io.containerd.grpc.v1.cri\"]\n",
            "  sandbox_image = \"registry.k8s.io/pause:3.10\"\n",
            "  x = 1\n",
            "  restrict_oom_score_adj = false\n",
        );
        let ours = containerd_config(kinds).unwrap();
        assert!(
            ours.contains(&format!("sandbox_image = \"{}\"", oci::PAUSE_REF)),
            "{ours}"
        );
        assert!(ours.contains("restrict_oom_score_adj = true"), "{ours}");
        assert!(!ours.contains("restrict_oom_score_adj = false"), "{ours}");
        assert!(ours.contains("x = 1"), "{ours}");
        let err = containerd_config("version = 2\n").unwrap_err();
        assert!(err.to_string().contains("no sandbox_image"), "{err}");
        let err = containerd_config("sandbox_image = \"x\"\n").unwrap_err();
        assert!(err.to_string().contains("no restrict_oom_score_adj"), "{err}");
    }

    #[test]
    fn the_cri_base_spec_gets_kinds_hook_and_loses_its_rlimits() {
        let spec = r#"{"process":{"rlimits":[{"type":"RLIMIT_NOFILE"}],"cwd":"/"},"hooks":{"createContainer":[{"path":"/a"}]}}"#;
        let edited: serde_json::Value = serde_json::from_str(&cri_base_spec(spec).unwrap()).unwrap();
        assert_eq!(edited["process"]["cwd"], "/");
        assert!(edited["process"].get("rlimits").is_none(), "{edited}");
        let hooks = edited["hooks"]["createContainer"].as_array().unwrap();
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks[1]["path"], "/kind/bin/mount-product-files.sh");
        let no_hooks: serde_json::Value =
            serde_json::from_str(&cri_base_spec(r#"{"process":{}}"#).unwrap()).unwrap();
        assert_eq!(no_hooks["hooks"]["createContainer"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn image_names_drop_registry_path_and_tag() {
        assert_eq!(image_name("registry.k8s.io/coredns/coredns:v1.12.1"), "coredns");
        assert_eq!(image_name("registry.k8s.io/etcd:3.6.6-0"), "etcd");
        assert_eq!(
            image_name("registry.k8s.io/kube-apiserver:v1.35.4"),
            "kube-apiserver"
        );
    }

    #[test]
    fn ldd_paths_are_the_resolved_libraries_and_the_loader() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibnftables.so.1 => /lib/x86_64-linux-gnu/libnftables.so.1 (0x00007f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            ldd_paths(ldd),
            [
                "/lib/x86_64-linux-gnu/libnftables.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
    }
}
