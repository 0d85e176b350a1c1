//! The VM host image: Debian trixie built with mmdebstrap from `images/host/`, as a qcow2 base plus
//! kernel and initrd for direct boot.
//!
//! Layout of a built entry (`<cache>/host-image/<key>/`):
//! `disk.qcow2` (a bare ext4 filesystem, no partition table: boot with
//! `root=/dev/vda`), `vmlinuz`, `initrd.img`, `kernel-config` (the kernel's
//! `/boot/config-*`), `packages.txt` (`dpkg -l`) and `image.json`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::entry::{read_json, require_built, write_json};
use super::error::{ImageError, io_err, transfer_err};
use super::mmdebstrap::{self, MANIFEST, Recipe};
use crate::cache::{Cache, RecipeKey};
use crate::progress::{Step, run_logged};
use crate::vm::BootImage;

/// The cache kind of the host image.
pub const KIND: &str = "host-image";
/// Bump when this file changes what a build produces.
const RECIPE_VERSION: &str = "host-image-1";
/// Virtual size of the disk (the ext4 filesystem fills it).
const DISK_SIZE: &str = "8G";
/// Fixed filesystem UUID and hash seed, so that builds can be compared.
const FS_UUID: &str = "6c61622d-686f-7374-2d69-6d6167650001";

/// A built host image.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct HostImage {
    /// The cache entry's directory.
    pub dir: PathBuf,
    /// The read-only qcow2 base (use it as a backing file).
    pub disk: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// The `dpkg -l` manifest.
    pub packages: PathBuf,
    /// The kernel's build configuration.
    pub kernel_config: PathBuf,
    /// e.g. `6.12.57+deb13-cloud-amd64`.
    pub kernel_version: String,
    /// The recipe key (the entry's directory name).
    pub key: String,
    /// Whether the kernel has 9p over virtio (a host directory at `/mnt/lab`).
    pub has_9p: bool,
}

impl From<&HostImage> for BootImage {
    fn from(image: &HostImage) -> BootImage {
        BootImage {
            disk: image.disk.clone(),
            kernel: image.kernel.clone(),
            initrd: image.initrd.clone(),
        }
    }
}

/// What `image.json` holds.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ImageJson {
    kind: String,
    key: String,
    suite: String,
    mirror: String,
    source_date_epoch: String,
    kernel_version: String,
    disk: String,
    disk_format: String,
    root_device: String,
    kernel: String,
    initrd: String,
    kernel_config: String,
    packages: String,
    has_9p: bool,
}

fn recipe() -> Recipe {
    Recipe::new("host", RECIPE_VERSION)
}

/// The cache key of the host image as the recipe stands now.
pub fn key() -> Result<RecipeKey, ImageError> {
    recipe().key()
}

/// Builds the host image unless it is cached; returns it.
pub fn build(cache: &Cache) -> Result<HostImage, ImageError> {
    let recipe = recipe();
    let key = recipe.key()?;
    let dir = cache.get_or_build(KIND, &key, |out, log| Ok(build_into(&recipe, out, log)?))?;
    load(&dir)
}

/// The cached host image; fails at once, naming `harness images build`, when it is missing.
pub fn require(cache: &Cache) -> Result<HostImage, ImageError> {
    load(&require_built(cache, KIND, &key()?, "VM host image", "host")?)
}

/// Reads a built entry's `image.json`.
pub fn load(dir: &Path) -> Result<HostImage, ImageError> {
    let json: ImageJson = read_json(&dir.join("image.json"))?;
    Ok(HostImage {
        dir: dir.to_path_buf(),
        disk: dir.join(&json.disk),
        kernel: dir.join(&json.kernel),
        initrd: dir.join(&json.initrd),
        packages: dir.join(&json.packages),
        kernel_config: dir.join(&json.kernel_config),
        kernel_version: json.kernel_version,
        key: json.key,
        has_9p: json.has_9p,
    })
}

fn build_into(recipe: &Recipe, out: &Path, log: &Path) -> Result<(), ImageError> {
    let key = recipe.key()?.hex();
    let tree = out.join("tree");
    let manifest = out.join(MANIFEST);

    let step = Step::start(format!("host image: mmdebstrap {}", mmdebstrap::SUITE));
    recipe.mmdebstrap(&tree, &manifest, &[], log, &step)?;
    step.finish();

    let (kernel_version, kernel_file) = find_kernel(&tree.join("boot"))?;
    let boot = tree.join("boot");
    copy(&boot.join(&kernel_file), &out.join("vmlinuz"))?;
    copy(
        &boot.join(format!("initrd.img-{kernel_version}")),
        &out.join("initrd.img"),
    )?;
    copy(
        &boot.join(format!("config-{kernel_version}")),
        &out.join("kernel-config"),
    )?;
    let config_path = out.join("kernel-config");
    let config = fs::read_to_string(&config_path).map_err(io_err("reading", &config_path))?;
    let has_9p = config_has(&config, "CONFIG_9P_FS") && config_has(&config, "CONFIG_NET_9P_VIRTIO");

    let step = Step::start("host image: ext4 filesystem");
    let raw = out.join("disk.raw");
    run_logged(
        Command::new("mke2fs")
            .env("E2FSPROGS_FAKE_TIME", mmdebstrap::SOURCE_DATE_EPOCH)
            .args(["-q", "-F", "-t", "ext4", "-L", "lab-root", "-U", FS_UUID])
            .arg("-E")
            .arg(format!("root_owner=0:0,hash_seed={FS_UUID}"))
            .arg("-d")
            .arg(&tree)
            .arg(&raw)
            .arg(DISK_SIZE),
        log,
        &step,
    )?;
    step.message("removing the build tree");
    fs::remove_dir_all(&tree).map_err(io_err("removing", &tree))?;
    step.finish();

    let step = Step::start("host image: qcow2");
    run_logged(
        Command::new("qemu-img")
            .args(["convert", "-f", "raw", "-O", "qcow2"])
            .arg(&raw)
            .arg(out.join("disk.qcow2")),
        log,
        &step,
    )?;
    fs::remove_file(&raw).map_err(io_err("removing", &raw))?;
    step.finish();

    let json = ImageJson {
        kind: KIND.to_string(),
        key,
        suite: mmdebstrap::SUITE.to_string(),
        mirror: mmdebstrap::MIRROR.to_string(),
        source_date_epoch: mmdebstrap::SOURCE_DATE_EPOCH.to_string(),
        kernel_version,
        disk: "disk.qcow2".into(),
        disk_format: "qcow2".into(),
        root_device: "/dev/vda".into(),
        kernel: "vmlinuz".into(),
        initrd: "initrd.img".into(),
        kernel_config: "kernel-config".into(),
        packages: MANIFEST.into(),
        has_9p,
    };
    write_json(&out.join("image.json"), &json)
}

/// The kernel version and file name of the one `vmlinuz-<version>` in `boot`.
fn find_kernel(boot: &Path) -> Result<(String, String), ImageError> {
    let mut found = Vec::new();
    for entry in fs::read_dir(boot).map_err(io_err("reading", boot))? {
        let name = entry
            .map_err(io_err("reading", boot))?
            .file_name()
            .to_string_lossy()
            .into_owned();
        if let Some(version) = name.strip_prefix("vmlinuz-") {
            found.push((version.to_string(), name.clone()));
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(ImageError::NoKernel {
            boot: boot.to_path_buf(),
        }),
        _ => Err(ImageError::ManyKernels {
            boot: boot.to_path_buf(),
            found,
        }),
    }
}

/// Whether a kernel config has `option` built in or as a module.
pub fn config_has(config: &str, option: &str) -> bool {
    config
        .lines()
        .any(|l| l == format!("{option}=y") || l == format!("{option}=m"))
}

fn copy(from: &Path, to: &Path) -> Result<(), ImageError> {
    fs::copy(from, to).map_err(transfer_err("copying", from, to))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_has_accepts_built_in_and_module_only() {
        let config = "CONFIG_DUMMY=m\nCONFIG_EXT4_FS=y\n# CONFIG_9P_FS is not set\nCONFIG_NLS=\"x\"\n";
        assert!(config_has(config, "CONFIG_DUMMY"));
        assert!(config_has(config, "CONFIG_EXT4_FS"));
        assert!(!config_has(config, "CONFIG_9P_FS"));
        assert!(!config_has(config, "CONFIG_NLS"));
    }

    #[test]
    fn find_kernel_names_the_one_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let err = find_kernel(dir.path()).unwrap_err();
        assert!(err.to_string().contains("no vmlinuz-*"), "{err}");
        fs::write(dir.path().join("vmlinuz-6.12.0-cloud-amd64"), "").unwrap();
        fs::write(dir.path().join("config-6.12.0-cloud-amd64"), "").unwrap();
        let (version, file) = find_kernel(dir.path()).unwrap();
        assert_eq!(version, "6.12.0-cloud-amd64");
        assert_eq!(file, "vmlinuz-6.12.0-cloud-amd64");
    }
}
