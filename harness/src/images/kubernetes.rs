//! The Kubernetes control plane and node binaries and etcd, built here from their
//! published Go modules at the versions pinned in `images/kubernetes/recipe.env`.
//!
//! Layout of a built entry (`<cache>/kubernetes/<key>/`):
//! * `bin/`: `kube-apiserver`, `kube-controller-manager`, `kube-scheduler`, `kube-proxy`,
//!   `kubelet`, `kubectl`, `kubeadm`, `etcd` — what the lab's control plane and its Kind node
//!   image run;
//! * `release/v<ver>/bin/linux/amd64/{kubelet,kubectl}` with `.sha256` holding
//!   the bare hex digest, so an HTTP server rooted at `release/` answers like
//!   `https://dl.k8s.io/release` (`Downloads.Kubernetes.BaseURL`);
//! * `offline/`: an offline bundle (`manifest.json` with `versions.kubernetes`,
//!   `kubernetes/v<ver>/bin/linux/amd64/{kubelet,kubectl}` and their `.sha256`
//!   as `sha256sum` writes them);
//! * `recipe/`: the recipe files it was built from, and `build.json`.
//!
//! The release and offline copies are hard links to `bin/`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent::artifact::source::{ArtifactSpec, KUBECTL, KUBELET};

use super::entry::{require_built, sha256_file, sidecar_of, write_json, write_sidecar_with};
use super::error::{ImageError, io_err, transfer_err};
use super::recipe::RecipeFiles;
use crate::cache::{Cache, RecipeKey};
use crate::progress::Step;

/// The cache kind of the Kubernetes binaries.
pub const KIND: &str = "kubernetes";
/// The recipe files, compiled in so the key and the build agree. Lowest priority: the machine
/// is shared and the build takes every core it gets.
const FILES: RecipeFiles = RecipeFiles {
    dir: "images/kubernetes",
    env: include_str!("../../../images/kubernetes/recipe.env"),
    script: include_str!("../../../images/kubernetes/build.sh"),
    lowest_priority: true,
};
/// Bump when this file changes what a build produces (layout, checks).
const PACK_REVISION: &str = "kubernetes-pack-2";
/// The only architecture built here.
pub const ARCH: &str = "amd64";
/// The Kubernetes commands built (one `go build`).
pub const KUBERNETES_BINARIES: [&str; 7] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
    "kubelet",
    "kubectl",
    "kubeadm",
];
/// The node binaries the agent downloads, laid out like upstream.
pub const NODE_BINARIES: [ArtifactSpec; 2] = [KUBELET, KUBECTL];

/// The pinned inputs read from `images/kubernetes/recipe.env`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipe {
    /// Without the `v` (`1.35.4`).
    pub version: String,
    /// The staging modules' version, without the `v` (`0.35.4`).
    pub staging_version: String,
    /// etcd's version, without the `v` (`3.6.6`).
    pub etcd_version: String,
    /// `GOTOOLCHAIN` (`go1.26.8`).
    pub go_toolchain: String,
}

impl Recipe {
    /// Parses `KEY=VALUE` lines (comments and blanks ignored).
    pub fn parse(text: &str) -> Result<Recipe, ImageError> {
        let env = FILES.env_of(text);
        let recipe = Recipe {
            version: env.version("KUBERNETES_VERSION", "1.35.4")?,
            staging_version: env.version("KUBERNETES_STAGING_VERSION", "1.35.4")?,
            etcd_version: env.version("ETCD_VERSION", "1.35.4")?,
            go_toolchain: env.value("GO_TOOLCHAIN")?,
        };
        env.number::<u64>("KUBERNETES_SOURCE_DATE_EPOCH")?;
        let expected_staging = format!(
            "0.{}",
            recipe.version.split_once('.').map_or("", |(_, rest)| rest)
        );
        if recipe.staging_version != expected_staging {
            return Err(env.bad(format!(
                "KUBERNETES_STAGING_VERSION={} does not match KUBERNETES_VERSION={} (expected \
                 {expected_staging})",
                recipe.staging_version, recipe.version
            )));
        }
        Ok(recipe)
    }

    /// The recipe as checked in.
    pub fn pinned() -> Result<Recipe, ImageError> {
        Recipe::parse(FILES.env)
    }
}

/// The cache key: both recipe files and the packing revision.
pub fn key() -> RecipeKey {
    FILES.key(KIND, PACK_REVISION)
}

/// The built Kubernetes binaries and etcd.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KubernetesArtifact {
    /// Without the `v` (`1.35.4`).
    pub version: String,
    /// Without the `v` (`3.6.6`).
    pub etcd_version: String,
    /// The cache entry's directory.
    pub dir: PathBuf,
    /// `<dir>/bin`: every binary.
    pub bin_dir: PathBuf,
    /// `<dir>/release`: serve it over HTTP and use its address as `Downloads.Kubernetes.BaseURL`.
    pub release_root: PathBuf,
    /// `<dir>/offline`: an offline bundle for `OfflineArtifacts.Source`.
    pub offline_bundle: PathBuf,
}

impl KubernetesArtifact {
    fn at(dir: &Path, recipe: &Recipe) -> Result<KubernetesArtifact, ImageError> {
        let artifact = KubernetesArtifact {
            version: recipe.version.clone(),
            etcd_version: recipe.etcd_version.clone(),
            dir: dir.to_path_buf(),
            bin_dir: dir.join("bin"),
            release_root: dir.join("release"),
            offline_bundle: dir.join("offline"),
        };
        let mut expected: Vec<PathBuf> = KUBERNETES_BINARIES
            .iter()
            .chain(&["etcd"])
            .map(|name| artifact.binary(name))
            .collect();
        for spec in NODE_BINARIES {
            for path in [artifact.release_binary(&spec), artifact.offline_binary(&spec)] {
                expected.push(sidecar_of(&path));
                expected.push(path);
            }
        }
        if let Some(missing) = expected.into_iter().find(|p| !p.is_file()) {
            return Err(ImageError::Incomplete {
                what: "Kubernetes",
                dir: dir.to_path_buf(),
                missing,
                rebuild: "`harness images build` (or `harness images kubernetes`)",
            });
        }
        Ok(artifact)
    }

    /// `<dir>/bin/<name>` (`kube-apiserver`, ..., `etcd`).
    pub fn binary(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// The node binary in the upstream download layout.
    pub fn release_binary(&self, spec: &ArtifactSpec) -> PathBuf {
        self.release_root.join(spec.upstream_path(&self.version, ARCH))
    }

    /// The node binary inside the offline bundle.
    pub fn offline_binary(&self, spec: &ArtifactSpec) -> PathBuf {
        self.offline_bundle.join(spec.bundle_path(&self.version, ARCH))
    }
}

/// Builds the binaries unless they are cached; returns them.
pub fn build(cache: &Cache) -> Result<KubernetesArtifact, ImageError> {
    let recipe = Recipe::pinned()?;
    let dir = cache.get_or_build(KIND, &key(), |out, log| Ok(build_into(&recipe, out, log)?))?;
    KubernetesArtifact::at(&dir, &recipe)
}

/// The cached binaries; fails at once, naming the command that builds them, when missing.
pub fn require(cache: &Cache) -> Result<KubernetesArtifact, ImageError> {
    let recipe = Recipe::pinned()?;
    let what = format!("Kubernetes v{} binaries", recipe.version);
    let dir = require_built(cache, KIND, &key(), &what, "kubernetes")?;
    KubernetesArtifact::at(&dir, &recipe)
}

fn build_into(recipe: &Recipe, out: &Path, log: &Path) -> Result<(), ImageError> {
    let step = Step::start(format!(
        "building Kubernetes v{} and etcd v{} (go build, {}; a cold build takes long)",
        recipe.version, recipe.etcd_version, recipe.go_toolchain
    ));
    let bin_dir = out.join("bin");
    FILES.run_build_script(out, &bin_dir, log, &step)?;
    step.message("checking versions, laying out the release and the offline bundle");
    check_versions(recipe, &bin_dir)?;
    pack(recipe, out)?;
    step.finish();
    Ok(())
}

/// Each binary reports the pinned version.
fn check_versions(recipe: &Recipe, bin_dir: &Path) -> Result<(), ImageError> {
    let want = format!("Kubernetes v{}", recipe.version);
    for name in KUBERNETES_BINARIES
        .iter()
        .filter(|n| !["kubectl", "kubeadm"].contains(n))
    {
        let out = agent::exec::run_stdout(Command::new(bin_dir.join(name)).arg("--version"))?;
        if out.trim() != want {
            return Err(ImageError::UnexpectedOutput {
                command: format!("{name} --version"),
                printed: out,
                expected: format!("{want:?}"),
            });
        }
    }
    let out = agent::exec::run_stdout(
        Command::new(bin_dir.join("kubectl")).args(["version", "--client", "-o", "json"]),
    )?;
    let json: serde_json::Value = serde_json::from_str(&out).map_err(|source| ImageError::Json {
        what: format!("kubectl version -o json printed {out:?}"),
        source,
    })?;
    let git_version = json["clientVersion"]["gitVersion"].as_str();
    let expected = format!("v{}", recipe.version);
    if git_version != Some(&expected) {
        return Err(ImageError::UnexpectedOutput {
            command: "kubectl version --client".into(),
            printed: git_version.unwrap_or_default().into(),
            expected,
        });
    }
    let out =
        agent::exec::run_stdout(Command::new(bin_dir.join("kubeadm")).args(["version", "-o", "short"]))?;
    if out.trim() != expected {
        return Err(ImageError::UnexpectedOutput {
            command: "kubeadm version -o short".into(),
            printed: out,
            expected,
        });
    }
    let out = agent::exec::run_stdout(Command::new(bin_dir.join("etcd")).arg("--version"))?;
    let want = format!("etcd Version: {}", recipe.etcd_version);
    if out.lines().next() != Some(&want) {
        return Err(ImageError::UnexpectedOutput {
            command: "etcd --version".into(),
            printed: out,
            expected: format!("{want:?} first"),
        });
    }
    Ok(())
}

/// Lays out the node binaries in the upstream and the offline bundle layouts.
fn pack(recipe: &Recipe, out: &Path) -> Result<(), ImageError> {
    let version = &recipe.version;
    for spec in NODE_BINARIES {
        let built = out.join("bin").join(spec.name);
        let offline = out.join("offline").join(spec.bundle_path(version, ARCH));
        let release = out.join("release").join(spec.upstream_path(version, ARCH));
        for path in [&offline, &release] {
            let parent = path.parent().expect("a path under out has a parent");
            fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
            fs::hard_link(&built, path).map_err(transfer_err("linking", &built, path))?;
        }
        // `<hex>  <name>` in the bundle (as the CoreDNS bundle), the bare hex like dl.k8s.io.
        let hex = sha256_file(&built)?;
        write_sidecar_with(&offline, &hex)?;
        let bare = sidecar_of(&release);
        fs::write(&bare, format!("{hex}\n")).map_err(io_err("writing", &bare))?;
    }
    write_json(
        &out.join("offline/manifest.json"),
        &serde_json::json!({ "versions": { "kubernetes": version } }),
    )?;
    write_json(
        &out.join("build.json"),
        &serde_json::json!({
            "module": "k8s.io/kubernetes",
            "version": version,
            "staging_version": recipe.staging_version,
            "etcd_module": "go.etcd.io/etcd/server/v3",
            "etcd_version": recipe.etcd_version,
            "go_toolchain": recipe.go_toolchain,
            "key": key().hex(),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_recipe_is_kubernetes_1_35_with_etcd_3_6() {
        let recipe = Recipe::pinned().unwrap();
        assert!(recipe.version.starts_with("1.35."), "{recipe:?}");
        assert!(recipe.etcd_version.starts_with("3.6."), "{recipe:?}");
        assert!(recipe.go_toolchain.starts_with("go1."), "{recipe:?}");
    }

    #[test]
    fn recipe_with_a_bad_or_missing_field_is_refused_naming_it() {
        let good = "KUBERNETES_VERSION=1.35.4\nKUBERNETES_STAGING_VERSION=0.35.4\n\
                    KUBERNETES_SOURCE_DATE_EPOCH=1776276082\nETCD_VERSION=3.6.6\nGO_TOOLCHAIN=go1.26.8\n";
        Recipe::parse(good).unwrap();
        let err = Recipe::parse(&good.replace("ETCD_VERSION=3.6.6\n", "")).unwrap_err();
        assert!(err.to_string().contains("ETCD_VERSION"), "{err}");
        let err = Recipe::parse(&good.replace("=0.35.4", "=0.35.3")).unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
        let err = Recipe::parse(&good.replace("=1.35.4", "=v1.35.4")).unwrap_err();
        assert!(err.to_string().contains("not like 1.35.4"), "{err}");
    }

    #[test]
    fn pack_lays_out_node_binaries_upstream_and_offline() {
        let out = tempfile::tempdir().unwrap();
        let recipe = Recipe::pinned().unwrap();
        let bin = out.path().join("bin");
        fs::create_dir_all(&bin).unwrap();
        for name in KUBERNETES_BINARIES.iter().chain(&["etcd"]) {
            fs::write(bin.join(name), format!("#!/bin/sh\necho {name}\n")).unwrap();
        }
        pack(&recipe, out.path()).unwrap();
        let artifact = KubernetesArtifact::at(out.path(), &recipe).unwrap();
        let v = &recipe.version;
        for spec in NODE_BINARIES {
            let name = spec.name;
            let release = artifact.release_binary(&spec);
            assert_eq!(
                release,
                out.path().join(format!("release/v{v}/bin/linux/amd64/{name}"))
            );
            let offline = artifact.offline_binary(&spec);
            assert_eq!(
                offline,
                out.path()
                    .join(format!("offline/kubernetes/v{v}/bin/linux/amd64/{name}"))
            );
            let bare = fs::read_to_string(sidecar_of(&release)).unwrap();
            assert_eq!(bare.len(), 65, "{bare:?}");
            let digest = bare.trim();
            assert!(agent::artifact::checksum::is_sha256_hex(digest), "{bare:?}");
            assert_eq!(
                fs::read_to_string(sidecar_of(&offline)).unwrap(),
                format!("{digest}  {name}\n")
            );
            assert_eq!(fs::read(&release).unwrap(), fs::read(bin.join(name)).unwrap());
        }
        let manifest: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(out.path().join("offline/manifest.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["versions"]["kubernetes"].as_str(), Some(v.as_str()));
    }

    #[test]
    fn an_incomplete_entry_is_refused_naming_the_missing_file() {
        let out = tempfile::tempdir().unwrap();
        let recipe = Recipe::pinned().unwrap();
        fs::create_dir_all(out.path().join("bin")).unwrap();
        let err = KubernetesArtifact::at(out.path(), &recipe).unwrap_err();
        assert!(err.to_string().contains("bin/kube-apiserver is missing"), "{err}");
        assert!(err.to_string().contains("harness images kubernetes"), "{err}");
    }

    #[test]
    fn require_names_the_command_that_builds_the_binaries() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path().to_path_buf()).unwrap();
        let err = require(&cache).unwrap_err();
        assert!(
            err.to_string().contains("harness images build kubernetes"),
            "{err}"
        );
    }
}
