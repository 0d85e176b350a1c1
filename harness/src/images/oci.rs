//! The lab's container images without a registry: the pause image (containerd's
//! `sandbox_image`) and a busybox test image, written as OCI image archives from
//! `images/oci/` (programs built by `build.sh`, packed by [`super::oci_layout`]).
//!
//! Layout of a built entry (`<cache>/oci-images/<key>/`):
//! * `container-images/amd64/<name>-<tag>.tar` and its `.sha256` (`<hex>  <file name>`),
//!   the same relative paths on the lab's artifact server and in the offline bundle;
//! * `manifest.json`: the one manifest of the images ([`ImagesManifest`]): for each image its
//!   ref, file, archive sha256 and size, manifest/config/layer digests, and what it was built from;
//! * `bin/`: the programs (`pause`, `busybox`); `recipe/`: the recipe files.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::entry::{read_json, require_built, write_json, write_sidecar_with};
use super::error::{ImageError, io_err};
use super::oci_layout::{ImageSpec, LayerEntry, WrittenImage, write_archive};
use super::recipe::RecipeFiles;
use crate::cache::{Cache, RecipeKey};
use crate::progress::Step;

/// The cache kind of the OCI images.
pub const KIND: &str = "oci-images";
/// The only architecture built here.
pub const ARCH: &str = "amd64";
/// The pause image: containerd's `sandbox_image` (kubeadm v1.35's default).
pub const PAUSE_REF: &str = "registry.k8s.io/pause:3.10.1";
/// The test image scenario pods run (`imagePullPolicy: Never`).
pub const TEST_IMAGE_REF: &str = "lab.unbounded.local/busybox:1.35.0";
/// The busybox applets linked in the test image's `/bin`.
pub const BUSYBOX_APPLETS: [&str; 36] = [
    "sh", "ash", "cat", "echo", "env", "false", "grep", "head", "hostname", "id", "ip", "kill", "ls",
    "mkdir", "nc", "nslookup", "ping", "printf", "ps", "rm", "sed", "seq", "sleep", "sort", "tail", "tee",
    "test", "timeout", "touch", "tr", "true", "uname", "uniq", "wc", "wget", "date",
];
/// Where the test image's busybox comes from (Debian's `busybox-static`, see scripts/setup.sh).
pub const HOST_BUSYBOX: &str = "/bin/busybox";
/// The recipe files, compiled in so the key and the build agree.
const FILES: RecipeFiles = RecipeFiles {
    dir: "images/oci",
    env: include_str!("../../../images/oci/recipe.env"),
    script: include_str!("../../../images/oci/build.sh"),
    lowest_priority: false,
};
/// Bump when this file or `oci_layout.rs` changes what a build produces.
const PACK_REVISION: &str = "oci-pack-2";
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The pinned inputs read from `images/oci/recipe.env`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipe {
    /// The pause image's tag (`3.10.1`).
    pub pause_version: String,
    /// The k8s.io/kubernetes module pause.c comes from, without `v` (`1.35.4`).
    pub pause_module_version: String,
    pub pause_c_sha256: String,
    /// The upstream busybox version the host's binary must report (`1.35.0`).
    pub busybox_version: String,
    pub source_date_epoch: u64,
}

impl Recipe {
    /// Parses `KEY=VALUE` lines (comments and blanks ignored).
    pub fn parse(text: &str) -> Result<Recipe, ImageError> {
        let env = FILES.env_of(text);
        Ok(Recipe {
            pause_version: env.value("PAUSE_VERSION")?,
            pause_module_version: env.value("PAUSE_MODULE_VERSION")?,
            pause_c_sha256: env.sha256("PAUSE_C_SHA256")?,
            busybox_version: env.value("BUSYBOX_VERSION")?,
            source_date_epoch: env.number("SOURCE_DATE_EPOCH")?,
        })
    }

    /// The recipe as checked in.
    pub fn pinned() -> Result<Recipe, ImageError> {
        Recipe::parse(FILES.env)
    }

    /// The refs the recipe's versions give (they must equal [`PAUSE_REF`] and [`TEST_IMAGE_REF`]).
    pub fn refs(&self) -> [String; 2] {
        [
            format!("registry.k8s.io/pause:{}", self.pause_version),
            format!("lab.unbounded.local/busybox:{}", self.busybox_version),
        ]
    }
}

/// The cache key: the recipe files, the refs, the packing revision and the host's busybox binary.
pub fn key() -> Result<RecipeKey, ImageError> {
    let busybox = fs::read(HOST_BUSYBOX).map_err(|source| ImageError::NoBusybox {
        path: HOST_BUSYBOX,
        source,
    })?;
    Ok(FILES
        .key(KIND, PACK_REVISION)
        .with("refs", format!("{PAUSE_REF} {TEST_IMAGE_REF}"))
        .with("busybox", busybox))
}

/// `manifest.json` of a built entry: the one place refs and digests are pinned.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImagesManifest {
    pub arch: String,
    pub key: String,
    pub images: Vec<ManifestImage>,
}

/// One image in [`ImagesManifest`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestImage {
    /// `pause` or `busybox`.
    pub name: String,
    pub reference: String,
    /// Relative to the entry (and to the artifact server's and the bundle's root):
    /// `container-images/amd64/pause-3.10.1.tar`.
    pub file: String,
    /// sha256 of the archive (`ContainerImages[].SHA256`).
    pub sha256: String,
    pub size: u64,
    pub manifest_digest: String,
    pub config_digest: String,
    pub layer_digest: String,
    /// What the image holds and where that came from.
    pub source: String,
}

/// A built entry.
#[derive(Clone, Debug)]
pub struct OciImages {
    /// The cache entry's directory.
    pub dir: PathBuf,
    pub manifest: ImagesManifest,
}

impl OciImages {
    /// Reads a built entry's `manifest.json`, checking every archive it names is there.
    pub fn load(dir: &Path) -> Result<OciImages, ImageError> {
        let manifest: ImagesManifest = read_json(&dir.join("manifest.json"))?;
        let images = OciImages {
            dir: dir.to_path_buf(),
            manifest,
        };
        for reference in [PAUSE_REF, TEST_IMAGE_REF] {
            let image = images.image(reference)?;
            for file in [images.path_of(image), images.sidecar_of(image)] {
                if !file.is_file() {
                    return Err(ImageError::Incomplete {
                        what: "OCI images",
                        dir: dir.to_path_buf(),
                        missing: file,
                        rebuild: "`harness images build`",
                    });
                }
            }
        }
        Ok(images)
    }

    /// The image with this ref.
    pub fn image(&self, reference: &str) -> Result<&ManifestImage, ImageError> {
        self.manifest
            .images
            .iter()
            .find(|i| i.reference == reference)
            .ok_or_else(|| ImageError::NoImage {
                manifest: self.dir.join("manifest.json"),
                reference: reference.to_string(),
            })
    }

    /// The pause image ([`PAUSE_REF`]).
    pub fn pause(&self) -> &ManifestImage {
        self.image(PAUSE_REF).expect("checked by load")
    }

    /// The test image ([`TEST_IMAGE_REF`]).
    pub fn test_image(&self) -> &ManifestImage {
        self.image(TEST_IMAGE_REF).expect("checked by load")
    }

    /// The archive of `image` in the cache.
    pub fn path_of(&self, image: &ManifestImage) -> PathBuf {
        self.dir.join(&image.file)
    }

    /// Its `.sha256` sidecar.
    pub fn sidecar_of(&self, image: &ManifestImage) -> PathBuf {
        super::entry::sidecar_of(&self.path_of(image))
    }
}

/// Builds the images unless they are cached; returns them.
pub fn build(cache: &Cache) -> Result<OciImages, ImageError> {
    let recipe = Recipe::pinned()?;
    let key = key()?;
    let dir = cache.get_or_build(KIND, &key, |out, log| Ok(build_into(&recipe, &key, out, log)?))?;
    OciImages::load(&dir)
}

/// The cached images; fails at once, naming `harness images build`, when they are missing.
pub fn require(cache: &Cache) -> Result<OciImages, ImageError> {
    let what = format!("OCI images {PAUSE_REF} and {TEST_IMAGE_REF}");
    OciImages::load(&require_built(cache, KIND, &key()?, &what, "oci")?)
}

/// Builds into `out` (a fresh directory): the programs, then the archives and the manifest.
pub fn build_into(recipe: &Recipe, key: &RecipeKey, out: &Path, log: &Path) -> Result<(), ImageError> {
    let pinned = [PAUSE_REF, TEST_IMAGE_REF];
    if recipe.refs() != pinned {
        return Err(ImageError::RefsDiffer {
            refs: recipe.refs(),
            pinned,
        });
    }
    let step = Step::start(format!(
        "OCI images: pause {} (gcc -static) and busybox {}",
        recipe.pause_version, recipe.busybox_version
    ));
    let bin = out.join("bin");
    FILES.run_build_script(out, &bin, log, &step)?;
    step.message("checking the programs, writing the archives");
    let pause_version = agent::exec::run_stdout(Command::new(bin.join("pause")).arg("-v"))?;
    let want = format!(
        "pause.c v{}-k8s-v{}",
        recipe.pause_version, recipe.pause_module_version
    );
    if pause_version.trim() != want {
        return Err(ImageError::UnexpectedOutput {
            command: "pause -v".into(),
            printed: pause_version,
            expected: format!("{want:?}"),
        });
    }
    let busybox_help = agent::exec::run_stdout(Command::new(bin.join("busybox")).arg("--help"))?;
    let want = format!("BusyBox v{} ", recipe.busybox_version);
    if !busybox_help.starts_with(&want) {
        return Err(ImageError::WrongBusybox {
            path: HOST_BUSYBOX,
            version: recipe.busybox_version.clone(),
            printed: busybox_help.lines().next().unwrap_or_default().to_string(),
        });
    }
    let applets = agent::exec::run_stdout(Command::new(bin.join("busybox")).arg("--list"))?;
    if let Some(missing) = BUSYBOX_APPLETS
        .iter()
        .find(|a| !applets.lines().any(|l| l == **a))
    {
        return Err(ImageError::NoApplet {
            busybox: HOST_BUSYBOX,
            applet: missing,
        });
    }

    let images_dir = out.join(format!("container-images/{ARCH}"));
    fs::create_dir_all(&images_dir).map_err(io_err("creating", &images_dir))?;
    let read = |path: PathBuf| fs::read(&path).map_err(io_err("reading", &path));
    let mut images = Vec::new();
    for (name, spec, source) in [
        (
            "pause",
            pause_spec(recipe, read(bin.join("pause"))?),
            format!(
                "/pause: build/pause/linux/pause.c of k8s.io/kubernetes@v{} (gcc -Os -static)",
                recipe.pause_module_version
            ),
        ),
        (
            "busybox",
            busybox_spec(recipe, read(bin.join("busybox"))?),
            format!("/bin/busybox: {}", first_line(&busybox_help)),
        ),
    ] {
        let file = format!("container-images/{ARCH}/{name}-{}.tar", tag(&spec.reference));
        let written = write_archive(&spec, &out.join(&file))?;
        write_sidecar_with(&written.path, &written.sha256)?;
        images.push(manifest_image(name, file, written, source));
    }
    let manifest = ImagesManifest {
        arch: ARCH.to_string(),
        key: key.hex(),
        images,
    };
    write_json(&out.join("manifest.json"), &manifest)?;
    step.finish();
    Ok(())
}

/// The pause image as upstream's Dockerfile makes it: `/pause`, user 65535, entrypoint `/pause`.
pub fn pause_spec(recipe: &Recipe, pause: Vec<u8>) -> ImageSpec {
    ImageSpec {
        reference: PAUSE_REF.to_string(),
        entries: vec![LayerEntry::file("pause", 0o755, pause)],
        entrypoint: Some(vec!["/pause".into()]),
        user: Some("65535:65535".into()),
        env: vec![PATH_ENV.into()],
        mtime: recipe.source_date_epoch,
        ..Default::default()
    }
}

/// The test image: `/bin/busybox`, its applets as links, a minimal `/etc`, `/tmp`; runs `sh`.
pub fn busybox_spec(recipe: &Recipe, busybox: Vec<u8>) -> ImageSpec {
    let mut entries = vec![
        LayerEntry::dir("bin", 0o755),
        LayerEntry::file("bin/busybox", 0o755, busybox),
    ];
    let mut applets = BUSYBOX_APPLETS.to_vec();
    applets.sort_unstable();
    entries.extend(
        applets
            .iter()
            .map(|a| LayerEntry::symlink(&format!("bin/{a}"), "busybox")),
    );
    entries.extend([
        LayerEntry::dir("etc", 0o755),
        LayerEntry::file("etc/group", 0o644, b"root:x:0:\nnogroup:x:65534:\n".to_vec()),
        LayerEntry::file(
            "etc/passwd",
            0o644,
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n".to_vec(),
        ),
        LayerEntry::dir("root", 0o700),
        LayerEntry::dir("tmp", 0o1777),
    ]);
    ImageSpec {
        reference: TEST_IMAGE_REF.to_string(),
        entries,
        cmd: Some(vec!["sh".into()]),
        env: vec![PATH_ENV.into()],
        mtime: recipe.source_date_epoch,
        ..Default::default()
    }
}

/// The tag of `reference` (`latest` without one).
pub fn tag(reference: &str) -> &str {
    super::oci_layout::tag_of(reference).unwrap_or("latest")
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default().trim()
}

/// The manifest's record of one written archive.
pub fn manifest_image(name: &str, file: String, written: WrittenImage, source: String) -> ManifestImage {
    ManifestImage {
        name: name.to_string(),
        reference: written.reference,
        file,
        sha256: written.sha256,
        size: written.size,
        manifest_digest: written.manifest_digest,
        config_digest: written.config_digest,
        layer_digest: written.layer_digest,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_recipe_gives_the_pinned_refs() {
        let recipe = Recipe::pinned().unwrap();
        assert_eq!(recipe.refs(), [PAUSE_REF, TEST_IMAGE_REF]);
        let kubernetes = super::super::kubernetes::Recipe::pinned().unwrap();
        assert_eq!(
            recipe.pause_module_version, kubernetes.version,
            "pause.c comes from the Kubernetes version the lab builds"
        );
    }

    #[test]
    fn recipe_without_a_field_is_refused_naming_it() {
        let err = Recipe::parse("PAUSE_VERSION=3.10.1\n").unwrap_err();
        assert!(err.to_string().contains("PAUSE_MODULE_VERSION"), "{err}");
        let bad = FILES.env.replace("PAUSE_C_SHA256=14a3", "PAUSE_C_SHA256=zz");
        let err = Recipe::parse(&bad).unwrap_err();
        assert!(err.to_string().contains("PAUSE_C_SHA256"), "{err}");
    }

    #[test]
    fn require_names_the_command_that_builds_the_images() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path().to_path_buf()).unwrap();
        let err = require(&cache).unwrap_err();
        assert!(err.to_string().contains("harness images build"), "{err}");
    }

    #[test]
    fn test_image_links_every_applet_to_busybox() {
        let spec = busybox_spec(&Recipe::pinned().unwrap(), b"bb".to_vec());
        for applet in BUSYBOX_APPLETS {
            let path = format!("bin/{applet}");
            assert!(
                spec.entries.iter().any(|e| e.path == path
                    && e.member
                        == super::super::oci_layout::Member::Symlink {
                            target: "busybox".into()
                        }),
                "{path}"
            );
        }
    }
}
