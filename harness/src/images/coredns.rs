//! The CoreDNS release artifact, built here from its published Go module at the
//! version pinned in `images/coredns/recipe.env` with the plugins it names, and packed as
//! upstream does; beside it the lab's cluster DNS, the same CoreDNS with the `kubernetes` plugin.
//!
//! Layout of a built entry (`<cache>/coredns/<key>/`):
//! * `coredns_<ver>_linux_amd64.tgz` (one member `coredns`, mode 0755, root,
//!   mtime `SOURCE_DATE_EPOCH`) and `coredns_<ver>_linux_amd64.tgz.sha256`
//!   (`<hex>  <file name>`), also at `release/v<ver>/` so an HTTP server rooted
//!   at `release/` answers like `https://github.com/coredns/coredns/releases/download`;
//! * `offline/`: an offline bundle (`manifest.json` with `versions.coredns`,
//!   `coredns/v<ver>/bin/linux/amd64/coredns` and its `.sha256`);
//! * `cluster/coredns-cluster`: the cluster DNS's binary (`COREDNS_CLUSTER_PLUGINS` as well);
//! * `recipe/`: the recipe files it was built from, and `build.json`.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use agent::names::PluginName;
use flate2::{Compression, GzBuilder};

pub use super::entry::write_sidecar;
use super::entry::{read_hex_of, require_built, sidecar_of, write_json};
use super::error::{ImageError, io_err, transfer_err};
use super::recipe::{RecipeEnv, RecipeFiles};
use crate::cache::{Cache, RecipeKey};
use crate::progress::Step;

/// The cache kind of the CoreDNS artifact.
pub const KIND: &str = "coredns";
/// The recipe files, compiled in so the key and the build agree.
const FILES: RecipeFiles = RecipeFiles {
    dir: "images/coredns",
    env: include_str!("../../../images/coredns/recipe.env"),
    script: include_str!("../../../images/coredns/build.sh"),
    lowest_priority: false,
};
/// Bump when this file changes what a build produces (packing, layout).
const PACK_REVISION: &str = "coredns-pack-2";
/// The only architecture built here.
pub const ARCH: &str = "amd64";
/// Where in an entry the cluster DNS's binary is.
const CLUSTER_BINARY: &str = "cluster/coredns-cluster";

/// The pinned inputs read from `images/coredns/recipe.env`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipe {
    /// Without the `v` (`1.15.0`).
    pub version: String,
    /// `GOTOOLCHAIN` (`go1.26.8`).
    pub go_toolchain: String,
    /// mtime of the tarball member and the gzip header.
    pub source_date_epoch: u32,
    /// The node's CoreDNS's plugins (`COREDNS_PLUGINS`), as `coredns -plugins` names them.
    pub plugins: Vec<PluginName>,
    /// What the cluster DNS's binary has as well (`COREDNS_CLUSTER_PLUGINS`).
    pub cluster_plugins: Vec<PluginName>,
}

impl Recipe {
    /// Parses `KEY=VALUE` lines (comments and blanks ignored).
    pub fn parse(text: &str) -> Result<Recipe, ImageError> {
        let env = FILES.env_of(text);
        let recipe = Recipe {
            version: env.version("COREDNS_VERSION", "1.15.0")?,
            go_toolchain: env.value("GO_TOOLCHAIN")?,
            source_date_epoch: env.number("SOURCE_DATE_EPOCH")?,
            plugins: plugin_list(&env, "COREDNS_PLUGINS")?,
            cluster_plugins: plugin_list(&env, "COREDNS_CLUSTER_PLUGINS")?,
        };
        if let Some(missing) = PluginName::BASELINE
            .iter()
            .find(|base| !recipe.plugins.iter().any(|p| p.as_str() == **base))
        {
            return Err(env.bad(format!(
                "COREDNS_PLUGINS lacks {missing}, which every LocalDNS Corefile uses"
            )));
        }
        Ok(recipe)
    }

    /// The recipe as checked in.
    pub fn pinned() -> Result<Recipe, ImageError> {
        Recipe::parse(FILES.env)
    }

    /// `coredns_<ver>_linux_amd64.tgz`.
    pub fn tarball_name(&self) -> String {
        format!("coredns_{}_linux_{ARCH}.tgz", self.version)
    }
}

/// The comma-separated plugin names of `key`, each checked as a plugin name.
fn plugin_list(env: &RecipeEnv<'_>, key: &str) -> Result<Vec<PluginName>, ImageError> {
    env.value(key)?
        .split(',')
        .map(|name| match PluginName::normalise(name) {
            Ok(plugin) if plugin.as_str() == name => Ok(plugin),
            Ok(plugin) => Err(env.bad(format!("{key}: write {name:?} as {plugin}"))),
            Err(e) => Err(env.bad(format!("{key}: {e}"))),
        })
        .collect()
}

/// The cache key: both recipe files and the packing revision.
pub fn key() -> RecipeKey {
    FILES.key(KIND, PACK_REVISION)
}

/// A built CoreDNS artifact.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CoreDnsArtifact {
    /// Without the `v` (`1.15.0`).
    pub version: String,
    /// The cache entry's directory.
    pub dir: PathBuf,
    /// `<dir>/coredns_<ver>_linux_amd64.tgz`.
    pub tarball: PathBuf,
    /// `<tarball>.sha256` (`<hex>  <file name>`).
    pub tarball_sidecar: PathBuf,
    pub tarball_sha256: String,
    /// `<dir>/release`: serve it over HTTP and use its address as `BaseURL`.
    pub release_root: PathBuf,
    /// `<dir>/offline`: an offline bundle for `OfflineArtifacts.Source`.
    pub offline_bundle: PathBuf,
    /// The binary inside the offline bundle.
    pub binary: PathBuf,
    pub binary_sha256: String,
    /// `<dir>/cluster/coredns-cluster`: the lab's cluster DNS (the `kubernetes` plugin as well).
    pub cluster_binary: PathBuf,
}

impl CoreDnsArtifact {
    fn at(dir: &Path, recipe: &Recipe) -> Result<CoreDnsArtifact, ImageError> {
        let version = recipe.version.clone();
        let tarball = dir.join(recipe.tarball_name());
        let tarball_sidecar = sidecar_of(&tarball);
        let binary = dir.join(format!("offline/coredns/v{version}/bin/linux/{ARCH}/coredns"));
        let cluster_binary = dir.join(CLUSTER_BINARY);
        if !cluster_binary.is_file() {
            return Err(ImageError::Incomplete {
                what: "CoreDNS",
                dir: dir.to_path_buf(),
                missing: cluster_binary,
                rebuild: "`harness images build` (or `harness images build coredns`)",
            });
        }
        Ok(CoreDnsArtifact {
            tarball_sha256: read_hex_of(&tarball_sidecar)?,
            binary_sha256: read_hex_of(&sidecar_of(&binary))?,
            release_root: dir.join("release"),
            offline_bundle: dir.join("offline"),
            dir: dir.to_path_buf(),
            version,
            tarball,
            tarball_sidecar,
            binary,
            cluster_binary,
        })
    }
}

/// Builds the artifact unless it is cached; returns it.
pub fn build(cache: &Cache) -> Result<CoreDnsArtifact, ImageError> {
    let recipe = Recipe::pinned()?;
    let dir = cache.get_or_build(KIND, &key(), |out, log| Ok(build_into(&recipe, out, log)?))?;
    CoreDnsArtifact::at(&dir, &recipe)
}

/// The cached artifact; fails at once, naming `harness images build`, when it is missing.
pub fn require(cache: &Cache) -> Result<CoreDnsArtifact, ImageError> {
    let recipe = Recipe::pinned()?;
    let what = format!("CoreDNS {} artifact", recipe.version);
    let dir = require_built(cache, KIND, &key(), &what, "coredns")?;
    CoreDnsArtifact::at(&dir, &recipe)
}

fn build_into(recipe: &Recipe, out: &Path, log: &Path) -> Result<(), ImageError> {
    let step = Step::start(format!(
        "building CoreDNS v{} with {} plugins and its cluster DNS build (go build, {})",
        recipe.version,
        recipe.plugins.len(),
        recipe.go_toolchain
    ));
    let gobin = out.join("gobin");
    FILES.run_build_script(out, &gobin, log, &step)?;
    step.message("checking both builds, packing the release tarball and the offline bundle");
    let built = gobin.join("coredns");
    let cluster = gobin.join("coredns-cluster");
    let cluster_plugins: Vec<PluginName> = recipe
        .plugins
        .iter()
        .chain(&recipe.cluster_plugins)
        .cloned()
        .collect();
    for (binary, plugins) in [(&built, &recipe.plugins), (&cluster, &cluster_plugins)] {
        check_version(binary, &recipe.version)?;
        check_plugins(binary, plugins)?;
    }
    let cluster_dest = out.join(CLUSTER_BINARY);
    let parent = cluster_dest.parent().expect("CLUSTER_BINARY is in a directory");
    fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
    fs::rename(&cluster, &cluster_dest).map_err(transfer_err("moving", &cluster, &cluster_dest))?;
    pack(recipe, &built, out)?;
    fs::remove_dir_all(&gobin).map_err(io_err("removing", &gobin))?;
    step.finish();
    Ok(())
}

fn check_version(binary: &Path, version: &str) -> Result<(), ImageError> {
    let out = agent::exec::run_stdout(Command::new(binary).arg("-version"))?;
    let expected = format!("CoreDNS-{version}");
    if out.lines().next() != Some(&expected) {
        return Err(ImageError::UnexpectedOutput {
            command: format!("{} -version", binary.display()),
            printed: out,
            expected,
        });
    }
    Ok(())
}

/// `coredns -plugins` of `binary` lists each of `plugins`.
fn check_plugins(binary: &Path, plugins: &[PluginName]) -> Result<(), ImageError> {
    let out = agent::exec::run_stdout(Command::new(binary).arg("-plugins"))?;
    let listed = agent::artifact::plugins::parse_plugin_list(&out);
    match plugins.iter().find(|p| !listed.contains(p.as_str())) {
        None => Ok(()),
        Some(missing) => Err(ImageError::UnexpectedOutput {
            command: format!("{} -plugins", binary.display()),
            printed: out,
            expected: format!("{missing} among the plugins (images/coredns/recipe.env)"),
        }),
    }
}

/// Lays out the tarball, the release directory and the offline bundle.
fn pack(recipe: &Recipe, built: &Path, out: &Path) -> Result<(), ImageError> {
    let version = &recipe.version;
    let bin_dir = out.join(format!("offline/coredns/v{version}/bin/linux/{ARCH}"));
    fs::create_dir_all(&bin_dir).map_err(io_err("creating", &bin_dir))?;
    let binary = bin_dir.join("coredns");
    fs::rename(built, &binary).map_err(transfer_err("moving", built, &binary))?;
    write_sidecar(&binary)?;
    write_json(
        &out.join("offline/manifest.json"),
        &serde_json::json!({ "versions": { "coredns": version } }),
    )?;

    let release_dir = out.join(format!("release/v{version}"));
    fs::create_dir_all(&release_dir).map_err(io_err("creating", &release_dir))?;
    let tarball = release_dir.join(recipe.tarball_name());
    write_tarball(&binary, &tarball, recipe.source_date_epoch)?;
    let sidecar = write_sidecar(&tarball)?;
    for file in [&tarball, &sidecar] {
        let link = out.join(file.file_name().expect("a file name"));
        fs::hard_link(file, &link).map_err(transfer_err("linking", file, &link))?;
    }
    write_json(
        &out.join("build.json"),
        &serde_json::json!({
            "module": "github.com/coredns/coredns",
            "version": version,
            "plugins": recipe.plugins,
            "cluster_plugins": recipe.cluster_plugins,
            "go_toolchain": recipe.go_toolchain,
            "key": key().hex(),
        }),
    )
}

/// A gzip tarball with one member `coredns` (0755, uid/gid 0, fixed mtime).
pub fn write_tarball(binary: &Path, tarball: &Path, mtime: u32) -> Result<(), ImageError> {
    let data = File::open(binary).map_err(io_err("reading", binary))?;
    write_tarball_of(data, tarball, mtime).map_err(io_err("writing", tarball))
}

fn write_tarball_of(data: File, tarball: &Path, mtime: u32) -> std::io::Result<()> {
    let size = data.metadata()?.len();
    let gz = GzBuilder::new()
        .mtime(mtime)
        .write(File::create(tarball)?, Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mut header = tar::Header::new_gnu();
    header.set_path("coredns")?;
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(size);
    header.set_mode(0o755);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(mtime.into());
    header.set_cksum();
    tar.append(&header, data)?;
    let file = tar.into_inner()?.finish()?;
    file.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_recipe_is_a_current_release() {
        let recipe = Recipe::pinned().unwrap();
        let minor: u32 = recipe.version.split('.').nth(1).unwrap().parse().unwrap();
        assert!(recipe.version.starts_with("1.") && minor >= 12, "{recipe:?}");
        assert_eq!(
            recipe.tarball_name(),
            format!("coredns_{}_linux_amd64.tgz", recipe.version)
        );
        assert_eq!(recipe.version, agent::artifact::source::COREDNS_DEFAULT_VERSION);
    }

    #[test]
    fn recipe_without_a_field_is_refused_naming_it() {
        let err = Recipe::parse("COREDNS_VERSION=1.15.0\nGO_TOOLCHAIN=go1.26.8\n").unwrap_err();
        assert!(err.to_string().contains("SOURCE_DATE_EPOCH"), "{err}");
        let err = Recipe::parse("COREDNS_VERSION=v1.15\n").unwrap_err();
        assert!(err.to_string().contains("not like 1.15.0"), "{err}");
    }

    #[test]
    fn pinned_plugins_hold_the_baseline_and_the_cluster_build_adds_kubernetes() {
        let recipe = Recipe::pinned().unwrap();
        for base in PluginName::BASELINE {
            assert!(recipe.plugins.iter().any(|p| p.as_str() == base), "{recipe:?}");
        }
        let cluster: Vec<&str> = recipe.cluster_plugins.iter().map(PluginName::as_str).collect();
        assert_eq!(cluster, ["kubernetes"]);
        assert!(
            !recipe.plugins.iter().any(|p| p.as_str() == "kubernetes"),
            "{recipe:?}"
        );
    }

    #[test]
    fn plugin_lists_without_the_baseline_or_with_a_bad_name_are_refused_naming_them() {
        let base = "COREDNS_VERSION=1.15.0\nGO_TOOLCHAIN=go1.26.8\nSOURCE_DATE_EPOCH=1\n\
                    COREDNS_CLUSTER_PLUGINS=kubernetes\n";
        let all = PluginName::BASELINE.join(",");
        Recipe::parse(&format!("{base}COREDNS_PLUGINS={all}\n")).unwrap();
        let err =
            Recipe::parse(&format!("{base}COREDNS_PLUGINS={}\n", all.replace("loop,", ""))).unwrap_err();
        assert!(err.to_string().contains("COREDNS_PLUGINS lacks loop"), "{err}");
        let err = Recipe::parse(&format!("{base}COREDNS_PLUGINS={all},Hosts\n")).unwrap_err();
        assert!(err.to_string().contains(r#"write "Hosts" as hosts"#), "{err}");
        let err = Recipe::parse(&format!("{base}COREDNS_PLUGINS={all}, hosts\n")).unwrap_err();
        assert!(err.to_string().contains("COREDNS_PLUGINS"), "{err}");
        let err = Recipe::parse(&format!("{base}COREDNS_PLUGINS={all},,hosts\n")).unwrap_err();
        assert!(err.to_string().contains("COREDNS_PLUGINS"), "{err}");
        let no_cluster = base.replace("COREDNS_CLUSTER_PLUGINS=kubernetes\n", "");
        let err = Recipe::parse(&format!("{no_cluster}COREDNS_PLUGINS={all}\n")).unwrap_err();
        assert!(err.to_string().contains("COREDNS_CLUSTER_PLUGINS"), "{err}");
    }

    #[test]
    fn tarball_is_reproducible_with_one_root_owned_0755_member() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("coredns");
        fs::write(&binary, b"#!/bin/sh\n").unwrap();
        let (a, b) = (dir.path().join("a.tgz"), dir.path().join("b.tgz"));
        write_tarball(&binary, &a, 1_792_549_052).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        write_tarball(&binary, &b, 1_792_549_052).unwrap();
        assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap());
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(File::open(&a).unwrap()));
        let entries: Vec<_> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().header().clone())
            .collect();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].path().unwrap().to_str(), Some("coredns"));
        assert_eq!(entries[0].mode().unwrap(), 0o755);
        assert_eq!((entries[0].uid().unwrap(), entries[0].gid().unwrap()), (0, 0));
        assert_eq!(entries[0].mtime().unwrap(), 1_792_549_052);
        let sidecar = write_sidecar(&a).unwrap();
        let text = fs::read_to_string(sidecar).unwrap();
        assert!(
            text.ends_with("  a.tgz\n") && text.len() == 64 + 2 + 5 + 1,
            "{text:?}"
        );
    }
}
