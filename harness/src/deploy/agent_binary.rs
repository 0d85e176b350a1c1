//! The agent binary a deployment copies into the VM: cargo's build of this checkout, refused when
//! it is missing or was built from other sources than the checkout's (the digest `agent/build.rs`
//! embeds, `agent::source_digest`), so a scenario never runs yesterday's agent. Content decides,
//! not file times: a fresh checkout beside an archived build (PR CI's test jobs) has every source
//! newer than the binary, and the binary is still right.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use agent::source_digest;

use super::error::DeployError;

/// Fails unless `binary` exists and embeds the digest of the agent's sources under `repo`. A
/// checkout without those sources (a harness run elsewhere) checks existence only.
pub fn ensure_fresh(binary: &Path, repo: &Path) -> Result<(), DeployError> {
    let missing = || DeployError::MissingAgentBinary {
        path: binary.to_path_buf(),
        fix: build_command(binary, repo),
    };
    let bytes = std::fs::read(binary).map_err(|_| missing())?;
    if !repo.join("agent/src").is_dir() {
        return Ok(());
    }
    let checkout = source_digest::compute(repo).map_err(|e| DeployError::AgentSources {
        repo: repo.to_path_buf(),
        why: e.to_string(),
    })?;
    let built = source_digest::find_embedded(&bytes);
    if built.as_deref() == Some(checkout.as_str()) {
        return Ok(());
    }
    Err(DeployError::StaleAgentBinary {
        path: binary.to_path_buf(),
        built: built.unwrap_or_else(|| "none (no digest in it)".into()),
        checkout,
        newest: newest_source(repo)
            .map(|(path, _)| path)
            .unwrap_or_else(|| repo.join("agent/src")),
        fix: build_command(binary, repo),
    })
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

/// The most recently modified file of the agent's sources under `repo`, with its time: a hint
/// at what changed since the build, for the error.
pub fn newest_source(repo: &Path) -> Option<(PathBuf, SystemTime)> {
    source_digest::files(repo)
        .ok()?
        .into_iter()
        .filter_map(|(_, path)| {
            let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
            Some((path, modified))
        })
        .max_by_key(|(_, modified)| *modified)
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

    const SOURCES: [&str; 5] = [
        "agent/src/lib.rs",
        "agent/src/cli/start.rs",
        "agent/Cargo.toml",
        "Cargo.toml",
        "Cargo.lock",
    ];

    /// A repository with the agent's sources and a target directory holding an agent built from
    /// them (a stand-in binary: some bytes, the embedded digest, more bytes).
    fn checkout() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        fs::create_dir_all(repo.join("agent/src/cli")).unwrap();
        for file in SOURCES {
            fs::write(repo.join(file), format!("// {file}")).unwrap();
        }
        let binary = dir.path().join("cache/target/debug/unbounded-agent");
        fs::create_dir_all(binary.parent().unwrap()).unwrap();
        let digest = source_digest::compute(&repo).unwrap();
        fs::write(
            &binary,
            format!("\x7fELF...{}{digest}\n...", source_digest::MARKER),
        )
        .unwrap();
        (dir, repo, binary)
    }

    #[test]
    fn a_binary_built_from_the_checkouts_sources_is_deployed_even_when_every_source_is_newer() {
        let (_dir, repo, binary) = checkout();
        // A fresh checkout beside an archived build: every file newer than the binary.
        for file in SOURCES {
            set_mtime(&repo.join(file), SystemTime::now() + Duration::from_secs(3600));
        }
        ensure_fresh(&binary, &repo).unwrap();
    }

    #[test]
    fn a_source_changed_after_the_build_refuses_naming_it_and_the_build_command_whatever_its_time() {
        let (_dir, repo, binary) = checkout();
        let changed = repo.join("agent/src/cli/start.rs");
        fs::write(&changed, "// changed").unwrap();
        // Its time does not hide the change (an editor or a checkout may set an old one).
        set_mtime(&changed, SystemTime::now() + Duration::from_secs(60));
        let err = ensure_fresh(&binary, &repo).unwrap_err();
        assert!(matches!(err, DeployError::StaleAgentBinary { .. }), "{err:?}");
        let text = err.to_string();
        let target = binary.parent().unwrap().parent().unwrap();
        for want in [
            binary.display().to_string(),
            changed.display().to_string(),
            source_digest::compute(&repo).unwrap(),
            format!(
                "`CARGO_TARGET_DIR={} cargo build --workspace --all-targets --locked`",
                target.display()
            ),
            "scripts/scenario.sh".to_owned(),
        ] {
            assert!(text.contains(&want), "{want:?} not in {text}");
        }
        set_mtime(&changed, SystemTime::now() - Duration::from_secs(86_400));
        assert!(
            ensure_fresh(&binary, &repo).is_err(),
            "an old time must not pass it"
        );
    }

    #[test]
    fn the_lock_file_and_the_workspace_manifest_count_too() {
        for file in ["Cargo.lock", "Cargo.toml"] {
            let (_dir, repo, binary) = checkout();
            fs::write(repo.join(file), "# changed").unwrap();
            let err = ensure_fresh(&binary, &repo).unwrap_err();
            assert!(
                matches!(err, DeployError::StaleAgentBinary { .. }),
                "{file}: {err:?}"
            );
        }
    }

    #[test]
    fn a_binary_without_a_digest_is_refused() {
        let (_dir, repo, binary) = checkout();
        fs::write(&binary, "\x7fELF an agent from before digests").unwrap();
        let text = ensure_fresh(&binary, &repo).unwrap_err().to_string();
        assert!(text.contains("none (no digest in it)"), "{text}");
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
