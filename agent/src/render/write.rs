//! Writing rendered files below a root directory, each with [`crate::files::write_atomic`] and
//! each link with [`crate::files::link_atomic`].

use std::path::{Path, PathBuf};

use super::Rendered;
use crate::files::{link_atomic, under, write_atomic};

/// A file or link that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct WriteError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Writes every file and link of `rendered` below `root` (`/` on a real host).
/// Rewriting identical content is harmless; a file is never seen half-written.
pub fn write_under(root: &Path, rendered: &Rendered) -> Result<(), WriteError> {
    for f in &rendered.files {
        let path = under(root, &f.path);
        write_atomic(&path, &f.contents, f.mode).map_err(|source| WriteError {
            path: path.clone(),
            source,
        })?;
    }
    for l in &rendered.links {
        let path = under(root, &l.path);
        link_atomic(&path, &l.target).map_err(|source| WriteError {
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}
