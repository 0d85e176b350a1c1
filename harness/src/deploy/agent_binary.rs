//! The agent binary a deployment copies into the VM: cargo's build of this checkout, refused when
//! it is missing or older than the agent's sources, so a scenario never runs yesterday's agent.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::error::DeployError;

/// The files of the repository that make the agent binary (besides the registry's crates).
const AGENT_SOURCES: &[&str] = &["agent/src", "agent/Cargo.toml", "Cargo.lock"];

/// Fails unless `binary` exists and is at least as new as every file of the agent's sources
/// under `repo`. A checkout without those sources (a harness run elsewhere) checks existence only.
pub fn ensure_fresh(binary: &Path, repo: &Path) -> Result<(), DeployError> {
    let built = std::fs::metadata(binary)
        .and_then(|m| m.modified())
        .map_err(|_| DeployError::MissingAgentBinary {
            path: binary.to_path_buf(),
            fix: build_command(binary, repo),
        })?;
    match newest_source(repo) {
        Some((newer, changed)) if changed > built => Err(DeployError::StaleAgentBinary {
            path: binary.to_path_buf(),
            newer,
            fix: build_command(binary, repo),
        }),
        _ => Ok(()),
    }
}

/// The command that (re)builds `binary` the way the project's scripts do (the whole workspace,
/// every target: the agent binary, and so its checkpoint key, depends on what cargo builds
/// together), with its target directory when it is not the repository's `target/`.
pub fn build_command(binary: &Path, repo: &Path) -> String {
    let target = binary.parent().and_then(Path::parent);
    match target {
        Some(target) if target != repo.join("target") => {
            format!("CARGO_TARGET_DIR={} {BUILD}", target.display())
        }
        _ => BUILD.to_owned(),
    }
}

/// `build_workspace` of `scripts/env.sh`.
const BUILD: &str = "cargo build --workspace --all-targets --locked";

/// The most recently modified file of the agent's sources under `repo`, with its time.
pub fn newest_source(repo: &Path) -> Option<(PathBuf, SystemTime)> {
    let mut newest: Option<(PathBuf, SystemTime)> = None;
    let mut pending: Vec<PathBuf> = AGENT_SOURCES.iter().map(|p| repo.join(p)).collect();
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                pending.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
            }
        } else if let Ok(modified) = meta.modified()
            && newest.as_ref().is_none_or(|(_, t)| modified > *t)
        {
            newest = Some((path, modified));
        }
    }
    newest
}

#[cfg(test)]
mod tests {
    use std::fs::{self, File};
    use std::time::Duration;

    use super::*;

    fn set_mtime(path: &Path, time: SystemTime) {
        File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(time)
            .unwrap();
    }

    /// A repository with the agent's sources and a target directory holding a built agent.
    fn checkout() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        fs::create_dir_all(repo.join("agent/src/cli")).unwrap();
        for file in [
            "agent/src/lib.rs",
            "agent/src/cli/start.rs",
            "agent/Cargo.toml",
            "Cargo.lock",
        ] {
            fs::write(repo.join(file), "x").unwrap();
        }
        let binary = dir.path().join("cache/target/debug/unbounded-agent");
        fs::create_dir_all(binary.parent().unwrap()).unwrap();
        fs::write(&binary, "elf").unwrap();
        let old = SystemTime::now() - Duration::from_secs(3600);
        for file in [
            "agent/src/lib.rs",
            "agent/src/cli/start.rs",
            "agent/Cargo.toml",
            "Cargo.lock",
        ] {
            set_mtime(&repo.join(file), old);
        }
        (dir, repo, binary)
    }

    #[test]
    fn a_binary_newer_than_every_source_is_deployed() {
        let (_dir, repo, binary) = checkout();
        ensure_fresh(&binary, &repo).unwrap();
    }

    #[test]
    fn a_source_changed_after_the_build_refuses_naming_it_and_the_build_command() {
        let (_dir, repo, binary) = checkout();
        let changed = repo.join("agent/src/cli/start.rs");
        set_mtime(&changed, SystemTime::now() + Duration::from_secs(60));
        let err = ensure_fresh(&binary, &repo).unwrap_err();
        assert!(matches!(err, DeployError::StaleAgentBinary { .. }), "{err:?}");
        let text = err.to_string();
        let target = binary.parent().unwrap().parent().unwrap();
        for want in [
            binary.display().to_string(),
            changed.display().to_string(),
            format!(
                "`CARGO_TARGET_DIR={} cargo build --workspace --all-targets --locked`",
                target.display()
            ),
            "scripts/scenario.sh".to_owned(),
        ] {
            assert!(text.contains(&want), "{want:?} not in {text}");
        }
    }

    #[test]
    fn a_newer_lock_file_counts_too() {
        let (_dir, repo, binary) = checkout();
        set_mtime(
            &repo.join("Cargo.lock"),
            SystemTime::now() + Duration::from_secs(60),
        );
        let err = ensure_fresh(&binary, &repo).unwrap_err();
        assert!(err.to_string().contains("Cargo.lock"), "{err}");
    }

    #[test]
    fn a_missing_binary_names_the_command_that_builds_it() {
        let (_dir, repo, binary) = checkout();
        fs::remove_file(&binary).unwrap();
        let text = ensure_fresh(&binary, &repo).unwrap_err().to_string();
        assert!(
            text.contains(&binary.display().to_string())
                && text.contains("cargo build --workspace --all-targets --locked`"),
            "{text}"
        );
    }

    #[test]
    fn the_repositorys_own_target_needs_no_target_dir_in_the_command() {
        let repo = Path::new("/src/repo");
        assert_eq!(
            build_command(&repo.join("target/debug/unbounded-agent"), repo),
            "cargo build --workspace --all-targets --locked"
        );
    }

    #[test]
    fn this_checkout_has_agent_sources() {
        let (newest, _) = newest_source(&crate::repo::root()).expect("agent sources");
        assert!(newest.starts_with(crate::repo::root()), "{}", newest.display());
    }
}
