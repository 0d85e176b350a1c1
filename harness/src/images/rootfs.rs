//! The nspawn machine rootfs: Debian trixie built with mmdebstrap from `images/rootfs/`, as the
//! gzip tarball (plus `.sha256`) the agent consumes through `MachineImage{URL,SHA256}`.
//!
//! Layout of a built entry (`<cache>/machine-rootfs/<key>/`): `rootfs.tar.gz`
//! (members `./etc/...`, owned by root, no device nodes: nspawn provides
//! `/dev`), `rootfs.tar.gz.sha256` (`<hex>  rootfs.tar.gz`), `packages.txt`
//! (`dpkg -l`) and `image.json`.

use std::path::{Path, PathBuf};
use std::process::Command;

pub use super::entry::sha256_file;
use super::entry::{read_json, require_built, sidecar_of, write_json, write_sidecar_with};
use super::error::ImageError;
use super::mmdebstrap::{self, MANIFEST, Recipe};
use crate::cache::{Cache, RecipeKey};
use crate::progress::{Step, run_logged};

/// The cache kind of the machine rootfs.
pub const KIND: &str = "machine-rootfs";
/// The tarball's file name.
pub const TARBALL: &str = "rootfs.tar.gz";
/// Bump when this file changes what a build produces.
const RECIPE_VERSION: &str = "machine-rootfs-1";

/// A built machine rootfs tarball.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Rootfs {
    /// The cache entry's directory.
    pub dir: PathBuf,
    /// `rootfs.tar.gz`.
    pub tarball: PathBuf,
    /// `rootfs.tar.gz.sha256`: `<hex>  rootfs.tar.gz`.
    pub sha256_file: PathBuf,
    /// The tarball's sha256 in hex.
    pub sha256: String,
    /// The `dpkg -l` manifest.
    pub packages: PathBuf,
    pub key: String,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ImageJson {
    kind: String,
    key: String,
    suite: String,
    mirror: String,
    source_date_epoch: String,
    tarball: String,
    sha256: String,
    packages: String,
}

fn recipe() -> Recipe {
    Recipe::new("rootfs", RECIPE_VERSION)
}

/// The cache key of the rootfs as the recipe stands now.
pub fn key() -> Result<RecipeKey, ImageError> {
    recipe().key()
}

/// Builds the rootfs tarball unless it is cached; returns it.
pub fn build(cache: &Cache) -> Result<Rootfs, ImageError> {
    let recipe = recipe();
    let key = recipe.key()?;
    let dir = cache.get_or_build(KIND, &key, |out, log| Ok(build_into(&recipe, out, log)?))?;
    load(&dir)
}

/// The cached rootfs; fails at once, naming `harness images build`, when it is missing.
pub fn require(cache: &Cache) -> Result<Rootfs, ImageError> {
    load(&require_built(
        cache,
        KIND,
        &key()?,
        "nspawn machine rootfs",
        "rootfs",
    )?)
}

/// Reads a built entry's `image.json`.
pub fn load(dir: &Path) -> Result<Rootfs, ImageError> {
    let json: ImageJson = read_json(&dir.join("image.json"))?;
    let tarball = dir.join(&json.tarball);
    Ok(Rootfs {
        dir: dir.to_path_buf(),
        sha256_file: sidecar_of(&tarball),
        tarball,
        sha256: json.sha256,
        packages: dir.join(&json.packages),
        key: json.key,
    })
}

fn build_into(recipe: &Recipe, out: &Path, log: &Path) -> Result<(), ImageError> {
    let key = recipe.key()?.hex();
    let tar = out.join("rootfs.tar");
    let step = Step::start(format!("machine rootfs: mmdebstrap {}", mmdebstrap::SUITE));
    recipe.mmdebstrap(&tar, &out.join(MANIFEST), &["--skip=output/dev"], log, &step)?;
    step.finish();

    let step = Step::start("machine rootfs: gzip");
    // `-n`: no name or timestamp in the gzip header, so equal trees give equal files.
    run_logged(Command::new("gzip").args(["-n", "-6"]).arg(&tar), log, &step)?;
    step.finish();

    let tarball = out.join(TARBALL);
    let sha256 = sha256_file(&tarball)?;
    write_sidecar_with(&tarball, &sha256)?;
    let json = ImageJson {
        kind: KIND.to_string(),
        key,
        suite: mmdebstrap::SUITE.to_string(),
        mirror: mmdebstrap::MIRROR.to_string(),
        source_date_epoch: mmdebstrap::SOURCE_DATE_EPOCH.to_string(),
        tarball: TARBALL.to_string(),
        sha256,
        packages: MANIFEST.to_string(),
    };
    write_json(&out.join("image.json"), &json)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn sha256_file_matches_a_known_digest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, "abc").unwrap();
        assert_eq!(
            sha256_file(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
