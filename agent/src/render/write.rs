//! Writing rendered files below a root directory, each with [`crate::files::write_atomic`] and
//! each link with [`crate::files::link_atomic`]; a machine's files are reached beneath its root
//! ([`crate::files::beneath`]), so a link in the machine's tree never leads a write onto the host.

use std::path::{Path, PathBuf};

use super::{Place, Rendered};
use crate::files::beneath::{Beneath, beneath};
use crate::files::{link_atomic, under, write_atomic};

/// A file or link that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct WriteError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Where one rendered file or link goes below `root`.
pub struct Destination {
    /// The path to read and write (through the machine root's open directory for a machine file).
    pub path: PathBuf,
    /// `root` + the rendered host path, for messages.
    pub shown: PathBuf,
    _held: Option<Beneath>,
}

/// The destination of the file or link at host `path` (`local` where it lives, `place`) below
/// `root`: a host file directly; a machine file beneath its machine's root (`path` without
/// `local`), refused when a link on the way leads out of it.
pub fn destination(root: &Path, path: &Path, local: &Path, place: Place) -> Result<Destination, WriteError> {
    let shown = under(root, path);
    if place == Place::Host {
        return Ok(Destination {
            path: shown.clone(),
            shown,
            _held: None,
        });
    }
    let depth = local
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .count();
    let mut machine_root = shown.clone();
    for _ in 0..depth {
        machine_root.pop();
    }
    // The machine root itself is the agent's own (`/var/lib/machines/<slot>`), made as before.
    let held = std::fs::create_dir_all(&machine_root)
        .and_then(|()| beneath(&machine_root, local))
        .map_err(|source| WriteError {
            path: shown.clone(),
            source,
        })?;
    Ok(Destination {
        path: held.path(),
        shown,
        _held: Some(held),
    })
}

/// Writes every file and link of `rendered` below `root` (`/` on a real host).
/// Rewriting identical content is harmless; a file is never seen half-written.
pub fn write_under(root: &Path, rendered: &Rendered) -> Result<(), WriteError> {
    for f in &rendered.files {
        let to = destination(root, &f.path, &f.local_path, f.place)?;
        write_atomic(&to.path, &f.contents, f.mode).map_err(|source| WriteError {
            path: to.shown.clone(),
            source,
        })?;
    }
    for l in &rendered.links {
        let to = destination(root, &l.path, &l.local_path, l.place)?;
        link_atomic(&to.path, &l.target).map_err(|source| WriteError {
            path: to.shown.clone(),
            source,
        })?;
    }
    Ok(())
}
