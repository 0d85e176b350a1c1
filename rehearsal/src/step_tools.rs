//! The tools a job's `uses:` steps put on its PATH, taken from this machine instead of
//! downloaded: Rust (rustup's proxies over this machine's toolchains) and Go. A job without a Go
//! step runs with this machine's Go hidden, as on a runner that never installed it.

use std::path::{Path, PathBuf};
use std::process::Command;

use agent::exec::run_stdout;

/// Why a tool step cannot be done here.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{0}")]
    Missing(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What this machine has.
#[derive(Clone, Debug)]
pub struct MachineTools {
    /// rustup's binary (its proxies `cargo`, `rustc`, ... are links to it).
    pub rustup: Option<PathBuf>,
    /// Where rustup keeps the toolchains (shared, read by every job).
    pub rustup_home: PathBuf,
    /// Go's installation (GOROOT).
    pub go_root: Option<PathBuf>,
}

/// The rustup proxies a Rust toolchain step provides.
const RUST_PROXIES: [&str; 8] = [
    "cargo",
    "rustc",
    "rustdoc",
    "rustfmt",
    "cargo-fmt",
    "cargo-clippy",
    "clippy-driver",
    "rustup",
];

impl MachineTools {
    /// Finds rustup and Go on this process's PATH (Go also at `/usr/local/go`).
    pub fn find() -> MachineTools {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/root".into());
        let go =
            on_path("go").or_else(|| Some(PathBuf::from("/usr/local/go/bin/go")).filter(|p| p.is_file()));
        MachineTools {
            rustup: on_path("rustup"),
            rustup_home: std::env::var_os("RUSTUP_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".rustup")),
            go_root: go
                .and_then(|go| std::fs::canonicalize(go).ok())
                .and_then(|go| go.parent()?.parent().map(Path::to_path_buf)),
        }
    }

    /// `dtolnay/rust-toolchain`: rustup's proxies in `<home>/.cargo/bin`, after checking that the
    /// machine's default toolchain has `components`. Returns the directory for PATH.
    pub fn install_rust(&self, home: &Path, components: &[String]) -> Result<PathBuf, ToolError> {
        let rustup = self.rustup.clone().ok_or_else(|| {
            ToolError::Missing("rustup is not on PATH: install Rust with rustup first".into())
        })?;
        let bin = home.join(".cargo/bin");
        std::fs::create_dir_all(&bin).map_err(|source| ToolError::Io {
            path: bin.clone(),
            source,
        })?;
        for proxy in RUST_PROXIES {
            let link = bin.join(proxy);
            if !link.exists() {
                std::os::unix::fs::symlink(&rustup, &link)
                    .map_err(|source| ToolError::Io { path: link, source })?;
            }
        }
        let installed = run_stdout(
            Command::new(&rustup)
                .args(["component", "list", "--installed"])
                .env("RUSTUP_HOME", &self.rustup_home),
        )
        .map_err(|e| ToolError::Missing(format!("listing Rust's components: {e}")))?;
        for component in components {
            if !installed
                .lines()
                .any(|line| line.starts_with(&format!("{component}-")))
            {
                return Err(ToolError::Missing(format!(
                    "Rust component `{component}` is not installed here: `rustup component add {component}`"
                )));
            }
        }
        Ok(bin)
    }

    /// `actions/setup-go`: this machine's Go on PATH. Returns its `bin` and a note when its
    /// version is not the one asked for (the recipes' GOTOOLCHAIN then fetches theirs).
    pub fn install_go(&self, version: Option<&str>) -> Result<(PathBuf, Option<String>), ToolError> {
        let root = self.go_root.clone().ok_or_else(|| {
            ToolError::Missing("Go is not installed here (no `go` on PATH or at /usr/local/go)".into())
        })?;
        let go = root.join("bin/go");
        let have =
            run_stdout(Command::new(&go).arg("version")).map_err(|e| ToolError::Missing(e.to_string()))?;
        let note = version
            .filter(|want| !have.contains(&format!("go{want}")))
            .map(|want| format!("Go {want} was asked for; this machine has {}", have.trim()));
        Ok((root.join("bin"), note))
    }
}

/// The first `name` on this process's PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_component_is_named_with_its_fix() {
        let tools = MachineTools::find();
        let home = tempfile::tempdir().unwrap();
        let err = tools
            .install_rust(home.path(), &["no-such-component".to_string()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("rustup component add no-such-component"), "{err}");
        assert!(home.path().join(".cargo/bin/cargo").exists());
    }

    #[test]
    fn go_is_found_and_a_version_it_is_not_is_noted() {
        let tools = MachineTools::find();
        let (bin, note) = tools
            .install_go(Some("0.1"))
            .expect("Go is installed on this machine (scripts/setup.sh)");
        assert!(bin.join("go").is_file());
        assert!(note.unwrap().contains("Go 0.1 was asked for"));
    }
}
