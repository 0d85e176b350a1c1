//! Shared steps of the mmdebstrap recipes under `images/`: recipe key, package list, the run, the manifest.
//!
//! A recipe is a directory `images/<name>/` holding a `packages` list (one
//! name a line, `#` comments), optionally a `path-exclude` list (one absolute
//! path pattern a line, `#` comments: files dpkg leaves out of the image), and a
//! `customize.sh` hook that mmdebstrap runs with the new root as `$1`, plus
//! whatever files the hook reads. The suite
//! is pinned, package versions are not: reproducible means a fixed
//! `SOURCE_DATE_EPOCH` plus the `dpkg -l` manifest stored with each build.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::error::{BadPackageName, BadPathPattern, ImageError, io_err};
use crate::cache::RecipeKey;
use crate::progress::{Step, run_logged};

/// The Debian suite every image is built from.
pub const SUITE: &str = "trixie";
/// The Debian mirror the images are built from.
pub const MIRROR: &str = "http://deb.debian.org/debian";
/// 2026-01-01T00:00:00Z: the timestamp of every file the build writes.
pub const SOURCE_DATE_EPOCH: &str = "1767225600";
/// The manifest stored with each image: `dpkg -l` of its root.
pub const MANIFEST: &str = "packages.txt";

/// One recipe directory under `images/`.
#[derive(Clone, Debug)]
pub struct Recipe {
    pub name: &'static str,
    pub dir: PathBuf,
    /// Bumped when the Rust side of the build changes what it produces.
    pub version: &'static str,
}

impl Recipe {
    /// The recipe `images/<name>` of this repository.
    pub fn new(name: &'static str, version: &'static str) -> Recipe {
        Recipe {
            name,
            dir: images_dir().join(name),
            version,
        }
    }

    /// The cache key: every file of the recipe (path, executable bit,
    /// contents), its version, the suite, the mirror and the epoch.
    pub fn key(&self) -> Result<RecipeKey, ImageError> {
        let mut key = RecipeKey::new(self.name)
            .with("version", self.version)
            .with("suite", SUITE)
            .with("mirror", MIRROR)
            .with("source-date-epoch", SOURCE_DATE_EPOCH);
        let mut files = Vec::new();
        collect_files(&self.dir, &mut files).map_err(io_err("reading the recipe", &self.dir))?;
        if files.is_empty() {
            return Err(ImageError::EmptyRecipe {
                dir: self.dir.clone(),
            });
        }
        files.sort();
        for file in files {
            let rel = file
                .strip_prefix(&self.dir)
                .unwrap_or(&file)
                .to_string_lossy()
                .into_owned();
            let bytes = fs::read(&file).map_err(io_err("reading", &file))?;
            let mode = file_mode(&file)?;
            key = key.with(&format!("file {rel} mode {mode:o}"), bytes);
        }
        Ok(key)
    }

    /// The package names of the recipe's `packages` list.
    pub fn packages(&self) -> Result<Vec<String>, ImageError> {
        let path = self.dir.join("packages");
        let text = fs::read_to_string(&path).map_err(io_err("reading", &path))?;
        let packages = parse_packages(&text).map_err(|source| ImageError::Packages {
            path: path.clone(),
            source,
        })?;
        if packages.is_empty() {
            return Err(ImageError::NoPackages { path });
        }
        Ok(packages)
    }

    /// The patterns of the recipe's `path-exclude` list (none without the file): files of the
    /// installed packages that dpkg does not unpack (`dpkg --path-exclude`).
    pub fn path_excludes(&self) -> Result<Vec<String>, ImageError> {
        let path = self.dir.join("path-exclude");
        let text = match fs::read_to_string(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            read => read.map_err(io_err("reading", &path))?,
        };
        parse_path_excludes(&text).map_err(|source| ImageError::PathExclude { path, source })
    }

    /// Runs mmdebstrap into `target` (a directory, or a file whose extension
    /// picks the format), running the recipe's `customize.sh` and writing the
    /// manifest to `manifest`. `extra` are further mmdebstrap options.
    pub fn mmdebstrap(
        &self,
        target: &Path,
        manifest: &Path,
        extra: &[&str],
        log: &Path,
        step: &Step,
    ) -> Result<(), ImageError> {
        let hook = self.dir.join("customize.sh");
        if !hook.is_file() {
            return Err(ImageError::NoHook { path: hook });
        }
        let mut cmd = Command::new("mmdebstrap");
        cmd.env("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
            .env("LC_ALL", "C.UTF-8")
            .arg("--mode=root")
            .arg("--variant=apt")
            .arg("--aptopt=Acquire::Retries \"3\"")
            .arg(format!("--include={}", self.packages()?.join(",")))
            .arg("--dpkgopt=path-exclude=/usr/share/man/*")
            .arg("--dpkgopt=path-exclude=/usr/share/locale/*")
            .arg("--dpkgopt=path-exclude=/usr/share/doc/*")
            .arg("--dpkgopt=path-include=/usr/share/doc/*/copyright")
            .args(
                self.path_excludes()?
                    .iter()
                    .map(|pattern| format!("--dpkgopt=path-exclude={pattern}")),
            )
            .arg(format!("--customize-hook={} \"$1\"", shell_quote(&hook)))
            .arg(format!(
                "--customize-hook=COLUMNS=200 dpkg-query --admindir=\"$1/var/lib/dpkg\" -l > {}",
                shell_quote(manifest)
            ))
            .args(extra)
            .arg(SUITE)
            .arg(target)
            .arg(MIRROR);
        Ok(run_logged(&mut cmd, log, step)?)
    }
}

/// `<repo>/images`, where the recipes live.
pub fn images_dir() -> PathBuf {
    crate::repo::root().join("images")
}

/// The names of a `packages` list: one a line, `#` starts a comment.
pub fn parse_packages(text: &str) -> Result<Vec<String>, BadPackageName> {
    let mut names = Vec::new();
    for (n, line) in list_entries(text) {
        let valid = line
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
        if !valid {
            return Err(BadPackageName {
                line: n + 1,
                name: line.to_string(),
            });
        }
        names.push(line.to_string());
    }
    Ok(names)
}

/// The patterns of a `path-exclude` list: one a line, `#` starts a comment; each an absolute
/// path (dpkg matches it against the package's file names, `*` and `?` as in the shell) without
/// `..`, white space, quotes or backslashes (it travels through mmdebstrap's options to dpkg's
/// configuration).
pub fn parse_path_excludes(text: &str) -> Result<Vec<String>, BadPathPattern> {
    let mut patterns = Vec::new();
    for (n, line) in list_entries(text) {
        let reason = if !line.starts_with('/') {
            Some("is not an absolute path")
        } else if line.chars().any(|c| c.is_whitespace() || "\"'\\".contains(c)) {
            Some("holds white space, a quote or a backslash")
        } else if line.split('/').any(|part| part == "..") {
            Some("holds `..`")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(BadPathPattern {
                line: n + 1,
                pattern: line.to_string(),
                reason,
            });
        }
        patterns.push(line.to_string());
    }
    Ok(patterns)
}

/// The entries of a recipe's list with their 0-based line numbers: each line without its `#`
/// comment, trimmed, blank ones skipped.
fn list_entries(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(n, line)| (n, line.split('#').next().unwrap_or("").trim()))
        .filter(|(_, line)| !line.is_empty())
}

/// The package names (second column of `ii` lines) of a `dpkg -l` manifest.
pub fn manifest_packages(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("ii "))
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|name| name.split(':').next().unwrap_or(name).to_string())
        .collect()
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if fs::symlink_metadata(&path)?.is_dir() {
            collect_files(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// The mode as git records it (`755` when any execute bit is set, else `644`), so the
/// key does not change with the umask of whoever cloned the repository.
fn file_mode(path: &Path) -> Result<u32, ImageError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = fs::symlink_metadata(path).map_err(io_err("reading", path))?;
    Ok(if meta.permissions().mode() & 0o111 != 0 {
        0o755
    } else {
        0o644
    })
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.to_string_lossy().replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_list_skips_comments_and_blank_lines() {
        let names = parse_packages("# head\nsystemd\n\n  nftables # firewall\n").unwrap();
        assert_eq!(names, ["systemd", "nftables"]);
    }

    #[test]
    fn packages_list_rejects_what_is_not_a_package_name() {
        let err = parse_packages("systemd\nfoo bar\n").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn manifest_packages_reads_installed_names() {
        let text = "Desired=Unknown\n||/ Name Version Architecture Description\n+++-====\n\
                    ii  systemd  257.9-1 amd64 system and service manager\n\
                    ii  libc6:amd64 2.41-12 amd64 GNU C Library\nrc  gone 1 amd64 removed\n";
        assert_eq!(manifest_packages(text), ["systemd", "libc6"]);
    }

    #[test]
    fn recipe_key_changes_with_a_recipe_file() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("packages"), "systemd\n").unwrap();
        let recipe = Recipe {
            name: "t",
            dir: dir.path().to_path_buf(),
            version: "1",
        };
        let before = recipe.key().unwrap().hex();
        fs::write(dir.path().join("packages"), "systemd\nnftables\n").unwrap();
        assert_ne!(before, recipe.key().unwrap().hex());
    }

    #[test]
    fn recipe_key_follows_the_execute_bit_but_not_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("customize.sh");
        fs::write(&file, "#!/bin/sh\n").unwrap();
        let recipe = Recipe {
            name: "t",
            dir: dir.path().to_path_buf(),
            version: "1",
        };
        let key_with = |mode: u32| {
            fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
            recipe.key().unwrap().hex()
        };
        assert_eq!(
            key_with(0o644),
            key_with(0o664),
            "group write (umask 002) changed the key"
        );
        assert_eq!(key_with(0o755), key_with(0o775));
        assert_ne!(
            key_with(0o644),
            key_with(0o755),
            "the execute bit must change the key"
        );
    }

    #[test]
    fn both_recipes_of_the_repository_are_readable() {
        for name in ["host", "rootfs"] {
            let recipe = Recipe::new(name, "1");
            assert!(recipe.packages().unwrap().contains(&"systemd".to_string()));
            recipe.path_excludes().unwrap();
            recipe.key().unwrap();
        }
    }

    #[test]
    fn path_exclude_list_skips_comments_and_blank_lines() {
        let patterns = parse_path_excludes("# head\n/usr/lib/cni/dhcp\n\n  /usr/bin/x-* # old\n").unwrap();
        assert_eq!(patterns, ["/usr/lib/cni/dhcp", "/usr/bin/x-*"]);
    }

    #[test]
    fn path_exclude_list_rejects_what_dpkg_could_not_take_naming_the_line() {
        for (text, line, reason) in [
            ("/ok\nusr/lib/cni/dhcp\n", 2, "absolute"),
            ("/usr/lib/cni/a b\n", 1, "white space"),
            ("/usr/lib/\"cni\"\n", 1, "quote"),
            ("/ok\n/ok2\n/usr/../etc/passwd\n", 3, ".."),
        ] {
            let err = parse_path_excludes(text).unwrap_err();
            assert_eq!(err.line, line, "{text:?}: {err}");
            assert!(err.to_string().contains(reason), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_recipe_without_a_path_exclude_list_excludes_nothing_and_a_bad_one_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let recipe = Recipe {
            name: "t",
            dir: dir.path().to_path_buf(),
            version: "1",
        };
        assert!(recipe.path_excludes().unwrap().is_empty());
        fs::write(dir.path().join("path-exclude"), "usr/lib/x\n").unwrap();
        let err = recipe.path_excludes().unwrap_err();
        let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(
            chain.contains("path-exclude") && chain.contains("line 1"),
            "{chain}"
        );
    }
}
