//! Where the repository is (its `images/` recipes, `node-configs/`, `deploy/crd/`, the evidence
//! under `target/`), found when the harness runs, not fixed when it was built.
//!
//! A build's path is not enough: two checkouts sharing one `CARGO_TARGET_DIR` (a clone for
//! `.ci/run` beside the working tree) share the harness binary too, and Cargo can take the other
//! checkout's build as fresh, so a path built in would point at the other checkout (or at a
//! deleted clone). In order, the first that applies:
//!
//! 1. `$REPO_ROOT` (set by `scripts/env.sh`);
//! 2. the repository holding `$CARGO_MANIFEST_DIR` as Cargo and nextest set it for a run (a
//!    remapped archive included);
//! 3. the repository holding the working directory;
//! 4. the repository the harness was built from.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The repository root (see the module's order).
pub fn root() -> PathBuf {
    find_root(&Clues {
        repo_root: std::env::var_os("REPO_ROOT"),
        manifest_dir: std::env::var_os("CARGO_MANIFEST_DIR"),
        working_dir: std::env::current_dir().ok(),
        built_from: built_from(),
    })
}

/// The repository this harness was built from.
fn built_from() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// What [`find_root`] goes by, read from the process (apart for the tests).
struct Clues {
    repo_root: Option<OsString>,
    manifest_dir: Option<OsString>,
    working_dir: Option<PathBuf>,
    built_from: PathBuf,
}

fn find_root(clues: &Clues) -> PathBuf {
    if let Some(root) = clues.repo_root.as_ref().filter(|v| !v.is_empty()) {
        return PathBuf::from(root);
    }
    let manifest = clues
        .manifest_dir
        .as_ref()
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    manifest
        .iter()
        .chain(clues.working_dir.iter())
        .find_map(|start| enclosing_repository(start))
        .unwrap_or_else(|| clues.built_from.clone())
}

/// The nearest of `start` and its ancestors that looks like this repository: a `Cargo.toml`
/// beside `images/` and `node-configs/`.
fn enclosing_repository(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| {
            dir.join("Cargo.toml").is_file()
                && dir.join("images").is_dir()
                && dir.join("node-configs").is_dir()
        })
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkout under `dir` with the repository's markers and a crate directory.
    fn checkout(dir: &Path) -> PathBuf {
        for sub in ["images", "node-configs", "harness/src"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::write(dir.join("Cargo.toml"), "[workspace]\n").unwrap();
        dir.to_path_buf()
    }

    fn clues(built_from: &Path) -> Clues {
        Clues {
            repo_root: None,
            manifest_dir: None,
            working_dir: None,
            built_from: built_from.to_path_buf(),
        }
    }

    #[test]
    fn repo_root_env_wins_over_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let here = checkout(&tmp.path().join("here"));
        let clues = Clues {
            repo_root: Some("/set/by/env".into()),
            manifest_dir: Some(here.join("harness").into()),
            working_dir: Some(here.clone()),
            ..clues(&here)
        };
        assert_eq!(find_root(&clues), PathBuf::from("/set/by/env"));
    }

    #[test]
    fn the_run_time_manifest_dir_is_found_before_the_built_in_checkout() {
        let tmp = tempfile::tempdir().unwrap();
        let built = checkout(&tmp.path().join("ci-clone"));
        let here = checkout(&tmp.path().join("work"));
        let clues = Clues {
            manifest_dir: Some(here.join("harness").into()),
            working_dir: Some(tmp.path().to_path_buf()),
            ..clues(&built)
        };
        assert_eq!(find_root(&clues), here);
    }

    #[test]
    fn the_working_directorys_checkout_is_found_from_deep_inside_it() {
        let tmp = tempfile::tempdir().unwrap();
        let here = checkout(&tmp.path().join("work"));
        let clues = Clues {
            manifest_dir: Some("".into()),
            working_dir: Some(here.join("harness/src")),
            ..clues(Path::new("/deleted/clone"))
        };
        assert_eq!(find_root(&clues), here);
    }

    #[test]
    fn a_directory_without_the_markers_is_passed_over_for_the_built_in_checkout() {
        let tmp = tempfile::tempdir().unwrap();
        // A Cargo workspace, but not this repository: no images/ or node-configs/.
        std::fs::write(tmp.path().join("Cargo.toml"), "[workspace]\n").unwrap();
        let clues = Clues {
            manifest_dir: Some(tmp.path().into()),
            working_dir: Some(tmp.path().to_path_buf()),
            ..clues(Path::new("/built/here"))
        };
        assert_eq!(find_root(&clues), PathBuf::from("/built/here"));
    }

    #[test]
    fn this_process_finds_the_repository_holding_the_workspace() {
        let root = root();
        assert!(root.join("Cargo.toml").is_file(), "{}", root.display());
        assert!(root.join("images/host").exists(), "{}", root.display());
        assert!(
            root.join("node-configs/localdns.json").is_file(),
            "{}",
            root.display()
        );
    }
}
