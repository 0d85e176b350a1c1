//! Finds the Go toolchain that builds the pinned third-party programs.

use std::path::PathBuf;

use anyhow::Context;

/// `go` from `PATH`, else `/usr/local/go/bin/go` (where this machine kind has it).
pub fn go_binary() -> anyhow::Result<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([PathBuf::from("/usr/local/go/bin")])
        .map(|dir| dir.join("go"))
        .find(|go| go.is_file())
        .context("no `go` on PATH nor at /usr/local/go/bin/go: install Go 1.21 or newer (the recipes pin their toolchain with GOTOOLCHAIN)")
}
