//! The one error type of artifact fetching, verification and installation.
//!
//! Every variant names what was wrong and where (the address, the archive
//! member, the bundle path), so the message alone tells an operator what to fix.

use std::path::PathBuf;

use crate::exec::CommandFailed;

/// Why an artifact could not be resolved, fetched, verified or installed.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The configured source cannot be used (bad URL, relative path, unknown arch).
    #[error("{field}: {reason}")]
    InvalidSource { field: String, reason: String },
    /// The server answered with an error status (after the given number of attempts).
    #[error("GET {url}: HTTP {status} (after {attempts} attempt{s})", s = plural(*attempts))]
    HttpStatus { url: String, status: u16, attempts: u32 },
    /// The request failed below HTTP (connect, TLS, timeout, reset).
    #[error("GET {url}: {reason} (after {attempts} attempt{s})", s = plural(*attempts))]
    Transport {
        url: String,
        reason: String,
        attempts: u32,
    },
    /// The body ended before its announced length.
    #[error(
        "GET {url}: truncated download, got {got} of {expected} bytes (after {attempts} attempt{s})",
        s = plural(*attempts)
    )]
    Truncated {
        url: String,
        got: u64,
        expected: u64,
        attempts: u32,
    },
    /// More bytes than the limit for this kind of file.
    #[error("{what} is larger than the limit of {limit} bytes")]
    TooLarge { what: String, limit: u64 },
    /// The checksum sidecar does not exist (every source must have one).
    #[error("checksum sidecar {sidecar} is missing ({reason}); every artifact needs a `.sha256` beside it")]
    MissingSidecar { sidecar: String, reason: String },
    /// The checksum sidecar exists but is not `<hex>` or `<hex>  <name>`.
    #[error("checksum sidecar {sidecar} is malformed: {reason}")]
    BadSidecar { sidecar: String, reason: String },
    /// The payload's SHA-256 differs from the sidecar's.
    #[error("checksum mismatch for {source_name}: expected sha256 {expected}, got {actual}")]
    ChecksumMismatch {
        source_name: String,
        expected: String,
        actual: String,
    },
    /// The archive is not exactly one regular file with the expected name.
    #[error("archive {archive} refused: {reason}")]
    Archive { archive: String, reason: String },
    /// The offline bundle lacks what is asked of it (never falls back to the network).
    #[error("offline bundle {bundle}: {reason}")]
    Offline { bundle: PathBuf, reason: String },
    /// The CoreDNS binary does not list a required plugin in `coredns -plugins`.
    #[error("CoreDNS binary is missing required plugin \"{plugin}\"")]
    MissingPlugin { plugin: String },
    /// The binary's own output could not be understood.
    #[error("{binary}: {reason}")]
    BadBinary { binary: PathBuf, reason: String },
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Running the candidate binary failed.
    #[error(transparent)]
    Exec(#[from] CommandFailed),
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Shorthand for a closure mapping an `io::Error` to [`ArtifactError::Io`].
pub(crate) fn io_err(
    action: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> ArtifactError {
    let path = path.into();
    move |source| ArtifactError::Io { action, path, source }
}
