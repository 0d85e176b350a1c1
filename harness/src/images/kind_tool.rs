//! The `kind` CLI and its base image's files, built here from the `sigs.k8s.io/kind` Go module at
//! the version pinned in `images/kind/recipe.env`.
//!
//! Layout of a built entry (`<cache>/kind/<key>/`):
//! * `bin/kind`: the CLI that creates, lists and deletes the lab's Kind clusters;
//! * `base-files/`: the module's `images/base/files` (the node container's
//!   `/usr/local/bin/entrypoint`, its containerd and kubelet units, `/kind/bin/*.sh`),
//!   the files Kind's base image adds to a Debian system;
//! * `recipe/`: the recipe files it was built from.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::entry::require_built;
use super::error::ImageError;
use super::recipe::RecipeFiles;
use crate::cache::{Cache, RecipeKey};
use crate::progress::Step;

/// The cache kind of the `kind` CLI.
pub const KIND: &str = "kind";
/// The recipe files, compiled in so the key and the build agree.
const FILES: RecipeFiles = RecipeFiles {
    dir: "images/kind",
    env: include_str!("../../../images/kind/recipe.env"),
    script: include_str!("../../../images/kind/build.sh"),
    lowest_priority: true,
};
/// Bump when this file changes what a build produces (layout, checks).
const PACK_REVISION: &str = "kind-pack-1";

/// The pinned inputs read from `images/kind/recipe.env`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipe {
    /// Without the `v` (`0.33.0`).
    pub version: String,
    /// `GOTOOLCHAIN` (`go1.26.8`).
    pub go_toolchain: String,
    /// crictl's version, without the `v` (`1.34.0`).
    pub crictl_version: String,
}

impl Recipe {
    /// Parses `KEY=VALUE` lines (comments and blanks ignored).
    pub fn parse(text: &str) -> Result<Recipe, ImageError> {
        let env = FILES.env_of(text);
        Ok(Recipe {
            version: env.version("KIND_VERSION", "0.33.0")?,
            go_toolchain: env.value("GO_TOOLCHAIN")?,
            crictl_version: env.version("CRICTL_VERSION", "1.34.0")?,
        })
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

/// The built `kind` CLI and base files.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KindTool {
    /// Without the `v` (`0.33.0`).
    pub version: String,
    /// The cache entry's directory.
    pub dir: PathBuf,
    /// `<dir>/bin/kind`.
    pub binary: PathBuf,
    /// `<dir>/base-files`: Kind's base image files, laid out as in the node's `/`.
    pub base_files: PathBuf,
}

/// What a Kind base image must hold of `base-files/`, relative to the node's `/`.
pub const BASE_FILES: [&str; 5] = [
    "usr/local/bin/entrypoint",
    "usr/local/bin/crictl",
    "etc/systemd/system/kubelet.service",
    "etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
    "etc/containerd/config.toml",
];

impl KindTool {
    fn at(dir: &Path, recipe: &Recipe) -> Result<KindTool, ImageError> {
        let tool = KindTool {
            version: recipe.version.clone(),
            dir: dir.to_path_buf(),
            binary: dir.join("bin/kind"),
            base_files: dir.join("base-files"),
        };
        let expected =
            std::iter::once(tool.binary.clone()).chain(BASE_FILES.iter().map(|f| tool.base_files.join(f)));
        if let Some(missing) = expected.into_iter().find(|p| !p.is_file()) {
            return Err(ImageError::Incomplete {
                what: "kind",
                dir: dir.to_path_buf(),
                missing,
                rebuild: "`harness images build kind`",
            });
        }
        Ok(tool)
    }
}

/// Builds `kind` unless it is cached; returns it.
pub fn build(cache: &Cache) -> Result<KindTool, ImageError> {
    let recipe = Recipe::pinned()?;
    let dir = cache.get_or_build(KIND, &key(), |out, log| Ok(build_into(&recipe, out, log)?))?;
    KindTool::at(&dir, &recipe)
}

/// The cached `kind`; fails at once, naming the command that builds it, when missing.
pub fn require(cache: &Cache) -> Result<KindTool, ImageError> {
    let recipe = Recipe::pinned()?;
    let what = format!("kind v{}", recipe.version);
    let dir = require_built(cache, KIND, &key(), &what, "kind")?;
    KindTool::at(&dir, &recipe)
}

fn build_into(recipe: &Recipe, out: &Path, log: &Path) -> Result<(), ImageError> {
    let step = Step::start(format!(
        "building kind v{} and crictl v{} (go install, {})",
        recipe.version, recipe.crictl_version, recipe.go_toolchain
    ));
    FILES.run_build_script(out, out, log, &step)?;
    step.message("checking the version");
    let printed = agent::exec::run_stdout(Command::new(out.join("bin/kind")).arg("version"))?;
    let want = format!("kind v{} ", recipe.version);
    if !printed.starts_with(&want) {
        return Err(ImageError::UnexpectedOutput {
            command: "kind version".into(),
            printed,
            expected: format!("{want:?} first"),
        });
    }
    let crictl = out.join("base-files/usr/local/bin/crictl");
    let printed = agent::exec::run_stdout(Command::new(&crictl).arg("--version"))?;
    let want = format!("crictl version v{}", recipe.crictl_version);
    if printed.trim() != want {
        return Err(ImageError::UnexpectedOutput {
            command: format!("{} --version", crictl.display()),
            printed,
            expected: format!("{want:?}"),
        });
    }
    step.finish();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_recipe_parses_and_names_what_is_wrong() {
        let recipe = Recipe::pinned().unwrap();
        assert_eq!(recipe.version.split('.').count(), 3, "{recipe:?}");
        let err = Recipe::parse(&FILES.env.replace("KIND_VERSION=", "KIND_VERSION=v")).unwrap_err();
        assert!(err.to_string().contains("images/kind/recipe.env"), "{err}");
        assert!(err.to_string().contains("not like 0.33.0"), "{err}");
        let err = Recipe::parse("KIND_VERSION=0.33.0\n").unwrap_err();
        assert!(err.to_string().contains("has no GO_TOOLCHAIN="), "{err}");
    }

    #[test]
    fn an_entry_without_the_entrypoint_is_incomplete_and_names_the_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/kind"), "").unwrap();
        let err = KindTool::at(dir.path(), &Recipe::pinned().unwrap()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("base-files/usr/local/bin/entrypoint"), "{text}");
        assert!(text.contains("harness images build kind"), "{text}");
    }
}
