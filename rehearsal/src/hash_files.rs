//! `hashFiles(...)`: one SHA-256 over the files a set of globs matches under the workspace, as
//! GitHub's runner computes cache keys (each file's digest, in path order; empty when none).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Why the files cannot be hashed.
#[derive(Debug, thiserror::Error)]
pub enum HashFilesError {
    #[error("hashFiles: bad pattern {pattern:?}: {why}")]
    Pattern { pattern: String, why: String },
    #[error("hashFiles: reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The files under `root` that `patterns` match (a leading `!` excludes), sorted.
pub fn matching_files(root: &Path, patterns: &[String]) -> Result<Vec<PathBuf>, HashFilesError> {
    let mut files = Vec::new();
    let mut excluded = Vec::new();
    for pattern in patterns {
        let (exclude, glob_text) = match pattern.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, pattern.as_str()),
        };
        let full = root.join(glob_text.trim_start_matches("./"));
        let bad = |why: String| HashFilesError::Pattern {
            pattern: pattern.clone(),
            why,
        };
        let paths = glob::glob(&full.to_string_lossy()).map_err(|e| bad(e.to_string()))?;
        for path in paths {
            let path = path.map_err(|e| bad(e.to_string()))?;
            // `dir/**` matches every file below `dir`, as on GitHub (the glob crate's `**`
            // matches the directories only).
            let found = if path.is_dir() && glob_text.ends_with("**") {
                files_under(&path)
            } else {
                vec![path]
            };
            for path in found.into_iter().filter(|p| p.is_file()) {
                if exclude {
                    excluded.push(path)
                } else {
                    files.push(path)
                }
            }
        }
    }
    files.retain(|f| !excluded.contains(f));
    files.sort();
    files.dedup();
    Ok(files)
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .flat_map(|p| if p.is_dir() { files_under(&p) } else { vec![p] })
        .collect()
}

/// The hash of the files `patterns` match under `root`; empty text when nothing matches.
pub fn hash_files(root: &Path, patterns: &[String]) -> Result<String, HashFilesError> {
    let files = matching_files(root, patterns)?;
    if files.is_empty() {
        return Ok(String::new());
    }
    let mut total = Sha256::new();
    for file in files {
        let bytes = std::fs::read(&file).map_err(|source| HashFilesError::Read {
            path: file.clone(),
            source,
        })?;
        total.update(Sha256::digest(&bytes));
    }
    Ok(hex::encode(total.finalize()))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in [
            ("images/a/recipe.env", "A=1"),
            ("images/b.sh", "b"),
            ("scripts/x.sh", "x"),
            ("README.md", "r"),
        ] {
            let path = dir.path().join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        dir
    }

    fn patterns(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_changed_file_under_a_pattern_changes_the_hash_and_one_outside_does_not() {
        let dir = tree();
        let globs = patterns(&["images/**", "scripts/*.sh"]);
        let before = hash_files(dir.path(), &globs).unwrap();
        assert_eq!(before.len(), 64);
        fs::write(dir.path().join("README.md"), "changed").unwrap();
        assert_eq!(hash_files(dir.path(), &globs).unwrap(), before);
        fs::write(dir.path().join("images/a/recipe.env"), "A=2").unwrap();
        assert_ne!(hash_files(dir.path(), &globs).unwrap(), before);
    }

    #[test]
    fn exclusions_apply_and_no_match_is_empty() {
        let dir = tree();
        let files = matching_files(dir.path(), &patterns(&["images/**", "!images/b.sh"])).unwrap();
        assert_eq!(files, [dir.path().join("images/a/recipe.env")]);
        assert_eq!(hash_files(dir.path(), &patterns(&["nothing/**"])).unwrap(), "");
    }
}
