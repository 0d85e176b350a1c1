//! The `recipe.env` + `build.sh` pair of the built-from-source artifacts (CoreDNS, Kubernetes, the OCI
//! images' programs): reading `recipe.env`, the pair's part of the cache key, and running `build.sh`.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::str::FromStr;

use super::error::{ImageError, io_err};
use crate::cache::RecipeKey;
use crate::progress::{Step, run_logged};

/// A recipe directory's `recipe.env` and `build.sh`, compiled in so the key and the build agree.
#[derive(Clone, Copy, Debug)]
pub struct RecipeFiles {
    /// Where the files are in the repository, for messages (`images/coredns`).
    pub dir: &'static str,
    /// The text of `recipe.env`.
    pub env: &'static str,
    /// The text of `build.sh`.
    pub script: &'static str,
    /// Run `build.sh` at the lowest CPU priority (`nice -n 19`): a long build on a shared machine.
    pub lowest_priority: bool,
}

impl RecipeFiles {
    /// The cache key of an entry built from these files: `kind`, both files, then the packing
    /// revision (bump it when the Rust side changes what a build produces). Add further inputs to it.
    pub fn key(&self, kind: &str, pack_revision: &str) -> RecipeKey {
        RecipeKey::new(kind)
            .with("recipe.env", self.env)
            .with("build.sh", self.script)
            .with("pack", pack_revision)
    }

    /// The checked-in `recipe.env`, to read values from.
    pub fn pinned_env(&self) -> RecipeEnv<'static> {
        self.env_of(self.env)
    }

    /// `text` read as this recipe's `recipe.env` (messages name the file).
    pub fn env_of<'a>(&self, text: &'a str) -> RecipeEnv<'a> {
        RecipeEnv { text, dir: self.dir }
    }

    /// Writes both files to `<out>/recipe/` (kept in the entry) and runs
    /// `sh <out>/recipe/build.sh <dest>` with `GO` set, its output going to `log` under `step`.
    pub fn run_build_script(
        &self,
        out: &Path,
        dest: &Path,
        log: &Path,
        step: &Step,
    ) -> Result<(), ImageError> {
        let recipe_dir = out.join("recipe");
        fs::create_dir_all(&recipe_dir).map_err(io_err("creating", &recipe_dir))?;
        for (name, text) in [("recipe.env", self.env), ("build.sh", self.script)] {
            let path = recipe_dir.join(name);
            fs::write(&path, text).map_err(io_err("writing", &path))?;
        }
        let mut command = if self.lowest_priority {
            let mut nice = Command::new("nice");
            nice.args(["-n", "19", "sh"]);
            nice
        } else {
            Command::new("sh")
        };
        command
            .arg(recipe_dir.join("build.sh"))
            .arg(dest)
            .env("GO", super::go::go_binary()?);
        Ok(run_logged(&mut command, log, step)?)
    }
}

/// The `KEY=VALUE` lines of a `recipe.env` (comments and blanks ignored).
#[derive(Clone, Copy, Debug)]
pub struct RecipeEnv<'a> {
    text: &'a str,
    dir: &'static str,
}

impl RecipeEnv<'_> {
    /// The non-empty value of `key`; an error naming the file and the key when it is missing.
    pub fn value(&self, key: &str) -> Result<String, ImageError> {
        self.text
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| ImageError::NoValue {
                dir: self.dir,
                key: key.to_string(),
            })
    }

    /// The value of `key` as a number (`SOURCE_DATE_EPOCH`).
    pub fn number<T: FromStr>(&self, key: &str) -> Result<T, ImageError> {
        let value = self.value(key)?;
        value
            .parse()
            .map_err(|_| self.bad(format!("{key}={value} is not a number")))
    }

    /// The value of `key` as a version without `v`, as many numbers as `like` has (`1.35.4`).
    pub fn version(&self, key: &str, like: &str) -> Result<String, ImageError> {
        let value = self.value(key)?;
        if value.split('.').count() != like.split('.').count()
            || !value.split('.').all(|p| p.parse::<u32>().is_ok())
        {
            return Err(self.bad(format!("{key}={value} is not like {like}")));
        }
        Ok(value)
    }

    /// The value of `key` as a SHA-256 hex digest.
    pub fn sha256(&self, key: &str) -> Result<String, ImageError> {
        let value = self.value(key)?;
        if !agent::artifact::checksum::is_sha256_hex(&value) {
            return Err(self.bad(format!("{key} is not a sha256 hex digest")));
        }
        Ok(value)
    }

    /// An error naming this `recipe.env` and what is wrong in it.
    pub fn bad(&self, problem: String) -> ImageError {
        ImageError::BadValue {
            dir: self.dir,
            problem,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILES: RecipeFiles = RecipeFiles {
        dir: "images/t",
        env: "# pinned\nVERSION=1.2.3\n EPOCH = 12\nEMPTY=\nDIGEST=zz\n",
        script: "set -eu\nmkdir -p \"$1\"\necho \"$GO\" >\"$1/go\"\n",
        lowest_priority: false,
    };

    #[test]
    fn recipe_env_reads_values_and_names_the_file_and_key_it_lacks() {
        let env = FILES.pinned_env();
        assert_eq!(env.value("VERSION").unwrap(), "1.2.3");
        assert_eq!(env.version("VERSION", "1.2.3").unwrap(), "1.2.3");
        let err = env.value("EMPTY").unwrap_err().to_string();
        assert_eq!(err, "images/t/recipe.env has no EMPTY=");
        let err = env.value("PINNED").unwrap_err().to_string();
        assert!(err.contains("has no PINNED="), "{err}");
        let err = FILES
            .env_of("VERSION=v1.2.3\n")
            .version("VERSION", "1.2.3")
            .unwrap_err();
        assert!(
            err.to_string().contains("VERSION=v1.2.3 is not like 1.2.3"),
            "{err}"
        );
        let err = env.number::<u64>("VERSION").unwrap_err();
        assert!(err.to_string().contains("VERSION=1.2.3 is not a number"), "{err}");
        let err = env.sha256("DIGEST").unwrap_err();
        assert!(err.to_string().contains("DIGEST is not a sha256"), "{err}");
    }

    #[test]
    fn key_hashes_kind_both_files_and_pack_revision_in_that_order() {
        let expected = RecipeKey::new("t")
            .with("recipe.env", FILES.env)
            .with("build.sh", FILES.script)
            .with("pack", "t-pack-1");
        assert_eq!(FILES.key("t", "t-pack-1").hex(), expected.hex());
        assert_ne!(FILES.key("t", "t-pack-2").hex(), expected.hex());
    }

    #[test]
    fn run_build_script_keeps_the_recipe_and_runs_it_on_the_destination() {
        let out = tempfile::tempdir().unwrap();
        let log = out.path().join("build.log");
        let dest = out.path().join("bin");
        let step = Step::start("test recipe");
        FILES.run_build_script(out.path(), &dest, &log, &step).unwrap();
        step.finish();
        assert_eq!(
            fs::read_to_string(out.path().join("recipe/recipe.env")).unwrap(),
            FILES.env
        );
        assert_eq!(
            fs::read_to_string(out.path().join("recipe/build.sh")).unwrap(),
            FILES.script
        );
        let go = fs::read_to_string(dest.join("go")).unwrap();
        assert_eq!(
            go.trim(),
            super::super::go::go_binary().unwrap().to_str().unwrap()
        );
    }

    #[test]
    fn a_lowest_priority_recipe_builds_at_niceness_19() {
        let files = RecipeFiles {
            script: "set -eu\nmkdir -p \"$1\"\nnice >\"$1/niceness\"\n",
            lowest_priority: true,
            ..FILES
        };
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("bin");
        let step = Step::start("test recipe at the lowest priority");
        files
            .run_build_script(out.path(), &dest, &out.path().join("build.log"), &step)
            .unwrap();
        step.finish();
        assert_eq!(fs::read_to_string(dest.join("niceness")).unwrap(), "19\n");
    }
}
