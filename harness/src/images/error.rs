//! [`ImageError`]: everything building, finding or reading an image or artifact of the cache can
//! fail with.

use std::io;
use std::path::{Path, PathBuf};

use agent::exec::CommandFailed;

use crate::cache::CacheError;
use crate::progress::RunLoggedError;

/// Why an image or artifact could not be built, found or read. Messages say what failed and
/// where; the cause, when there is one, is the [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The Kind node image cannot be assembled from the lab's parts.
    #[error("Kind node image: {0}")]
    KindNode(String),
    /// A build step (`build.sh`, mmdebstrap, mke2fs, ...) failed; its output is in the log.
    #[error(transparent)]
    Build(#[from] RunLoggedError),
    /// A built program could not be run to check it, or failed.
    #[error(transparent)]
    Command(#[from] CommandFailed),
    /// The entry is not built; names the command that builds it.
    #[error(
        "no {what} ({kind} {key}) in {root}: run `harness images build` (or `harness images build {image}`)"
    )]
    NotBuilt {
        what: String,
        kind: String,
        key: String,
        root: PathBuf,
        image: String,
    },
    #[error(
        "the cached {what} entry {dir} is incomplete: {missing} is missing; delete the entry and run {rebuild}"
    )]
    Incomplete {
        what: &'static str,
        dir: PathBuf,
        missing: PathBuf,
        rebuild: &'static str,
    },
    /// A file operation on `path`: `what` is `reading`, `writing`, `creating`, `removing`, `hashing`.
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file operation from one path to another: `what` is `copying`, `linking` or `moving`.
    #[error("{what} {from} to {to}")]
    Transfer {
        what: &'static str,
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: io::Error,
    },
    /// JSON that could not be read or written (`what`: `parsing <path>`, ...).
    #[error("{what}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path} holds {text:?}, not a SHA-256 hex digest first")]
    BadSidecar { path: PathBuf, text: String },
    #[error("{path} has no file name")]
    NoFileName { path: PathBuf },
    #[error("{dir}/recipe.env has no {key}=")]
    NoValue { dir: &'static str, key: String },
    #[error("{dir}/recipe.env: {problem}")]
    BadValue { dir: &'static str, problem: String },
    #[error("recipe directory {dir} is missing or empty")]
    EmptyRecipe { dir: PathBuf },
    #[error("recipe hook {path} is missing")]
    NoHook { path: PathBuf },
    #[error("{path} lists no packages")]
    NoPackages { path: PathBuf },
    #[error("in {path}")]
    Packages {
        path: PathBuf,
        #[source]
        source: BadPackageName,
    },
    #[error("in {path}")]
    PathExclude {
        path: PathBuf,
        #[source]
        source: BadPathPattern,
    },
    #[error(
        "no `go` on PATH nor at /usr/local/go/bin/go: install Go 1.21 or newer (the recipes pin their toolchain with GOTOOLCHAIN)"
    )]
    NoGo,
    #[error("no vmlinuz-* in {boot}: the recipe installs no kernel")]
    NoKernel { boot: PathBuf },
    #[error("more than one kernel in {boot}: {found:?}")]
    ManyKernels {
        boot: PathBuf,
        found: Vec<(String, String)>,
    },
    /// A built program reports another version than the recipe pins.
    #[error("{command} printed {printed:?}, expected {expected}")]
    UnexpectedOutput {
        command: String,
        printed: String,
        expected: String,
    },
    #[error(
        "reading {path}: the test image needs Debian's busybox-static (scripts/setup.sh installs it: apt-get install busybox-static)"
    )]
    NoBusybox {
        path: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(
        "{path} is not BusyBox v{version} (it prints {printed:?}); update BUSYBOX_VERSION in images/oci/recipe.env and TEST_IMAGE_REF together"
    )]
    WrongBusybox {
        path: &'static str,
        version: String,
        printed: String,
    },
    #[error("{busybox} has no applet {applet}")]
    NoApplet {
        busybox: &'static str,
        applet: &'static str,
    },
    #[error(
        "images/oci/recipe.env gives refs {refs:?}, but harness/src/images/oci.rs pins {} and {}: change both together",
        .pinned[0], .pinned[1]
    )]
    RefsDiffer {
        refs: [String; 2],
        pinned: [&'static str; 2],
    },
    #[error("{manifest} lists no image {reference}")]
    NoImage { manifest: PathBuf, reference: String },
    #[error("image ref {reference:?} has no tag (expected name:tag)")]
    NoTag { reference: String },
    #[error("layer path {path:?} must be relative and without `..`")]
    LayerPath { path: String },
    #[error("building the layer")]
    Layer(#[source] Box<ImageError>),
    /// Writing a tar archive in memory (`what`: the member, or the archive's end).
    #[error("{what}")]
    Tar {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("describing the image in OCI terms")]
    Oci(#[from] oci_spec::OciSpecError),
}

/// A line of a recipe's `packages` list that is not a package name.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {name:?} is not a Debian package name")]
pub struct BadPackageName {
    pub line: usize,
    pub name: String,
}

/// A line of a recipe's `path-exclude` list that dpkg could not take as a path pattern.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {pattern:?} {reason}")]
pub struct BadPathPattern {
    pub line: usize,
    pub pattern: String,
    pub reason: &'static str,
}

/// [`ImageError::Io`] for `what` (`reading`, `writing`, ...) on `path`.
pub(crate) fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> ImageError + use<> {
    let path = path.to_path_buf();
    move |source| ImageError::Io { what, path, source }
}

/// [`ImageError::Transfer`] for `what` (`copying`, `linking`, `moving`) from `from` to `to`.
pub(crate) fn transfer_err(
    what: &'static str,
    from: &Path,
    to: &Path,
) -> impl FnOnce(io::Error) -> ImageError + use<> {
    let (from, to) = (from.to_path_buf(), to.to_path_buf());
    move |source| ImageError::Transfer {
        what,
        from,
        to,
        source,
    }
}
