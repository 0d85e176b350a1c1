//! Finds the Go toolchain that builds the pinned third-party programs.

use std::path::PathBuf;

use super::error::ImageError;

/// `go` from `PATH`, else `/usr/local/go/bin/go` (where this machine kind has it).
pub fn go_binary() -> Result<PathBuf, ImageError> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([PathBuf::from("/usr/local/go/bin")])
        .map(|dir| dir.join("go"))
        .find(|go| go.is_file())
        .ok_or(ImageError::NoGo)
}
