//! At daemon start, the applied config of each slot must still match its `.sha256` sidecar (the
//! digest `start`, `apply` and `repave` wrote when they committed it): a config changed behind the
//! agent's back is refused, with both digests, before the daemon acts on anything.

use std::path::{Path, PathBuf};

use crate::artifact::checksum;
use crate::names::Slot;
use crate::start::node::applied_paths;

/// An applied config that does not match its sidecar, or that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum AppliedConfigError {
    #[error(
        "the applied config {config} does not match its sidecar {sidecar} (sha256 {actual}, the sidecar says {recorded}): \
         it was changed outside the agent; refusing to act on this node (restore it, or run `unbounded-agent apply --config` with the intended config)"
    )]
    Mismatch {
        config: PathBuf,
        sidecar: PathBuf,
        actual: String,
        recorded: String,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Checks every slot's committed applied config under `root`; a slot without one (or not
/// committed yet: no sidecar) is skipped.
pub fn check(root: &Path) -> Result<(), AppliedConfigError> {
    for slot in Slot::ALL {
        let (config, sidecar) = applied_paths(root, slot);
        if !config.exists() || !sidecar.exists() {
            continue;
        }
        let read_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| AppliedConfigError::Read { path, source }
        };
        let recorded = std::fs::read_to_string(&sidecar).map_err(read_err(&sidecar))?;
        let recorded = recorded.split_whitespace().next().unwrap_or_default().to_string();
        let actual = checksum::sha256_file(&config).map_err(read_err(&config))?;
        if actual != recorded {
            return Err(AppliedConfigError::Mismatch {
                config,
                sidecar,
                actual,
                recorded,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, slot: Slot, json: &str, digest_of: &str) {
        let (config, sidecar) = applied_paths(root, slot);
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(&config, json).unwrap();
        let digest = crate::artifact::checksum::sha256_bytes(digest_of.as_bytes());
        std::fs::write(&sidecar, format!("{digest}  applied.json\n")).unwrap();
    }

    #[test]
    fn no_applied_config_or_a_matching_one_passes() {
        let root = tempfile::tempdir().unwrap();
        check(root.path()).unwrap();
        write(root.path(), Slot::Kube1, "{\"a\":1}", "{\"a\":1}");
        check(root.path()).unwrap();
    }

    #[test]
    fn a_config_changed_behind_the_agents_back_is_refused_naming_both_digests() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), Slot::Kube2, "{\"a\":2}", "{\"a\":1}");
        let err = check(root.path()).unwrap_err().to_string();
        let actual = crate::artifact::checksum::sha256_bytes(b"{\"a\":2}");
        let recorded = crate::artifact::checksum::sha256_bytes(b"{\"a\":1}");
        assert!(
            err.contains("does not match its sidecar")
                && err.contains(&actual)
                && err.contains(&recorded)
                && err.contains("kube2"),
            "{err}"
        );
    }
}
