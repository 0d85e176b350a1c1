//! The digest of the sources an agent binary is built from: `agent/build.rs` embeds it in the
//! binary (after [`MARKER`], also printed by `unbounded-agent --version`), and the harness compares
//! it with the digest of the checkout it deploys from, so a stale binary is refused by content,
//! never by file times (a fresh checkout's files are all newer than an archived build).
//!
//! Only `std` and `sha2` here, no other module of the crate: the build script includes this file.

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The workspace's files and directories that make the agent binary (its crate and the
/// workspace crates it uses), besides the registry's crates (the workspace manifest holds the
/// build profiles).
pub const INPUTS: &[&str] = &[
    "agent/src",
    "agent/build.rs",
    "agent/Cargo.toml",
    "machina/src",
    "machina/Cargo.toml",
    "node-base/src",
    "node-base/Cargo.toml",
    "localdns/src",
    "localdns/Cargo.toml",
    "localdns-supervisor/src",
    "localdns-supervisor/Cargo.toml",
    "Cargo.toml",
    "Cargo.lock",
];

/// What precedes the 64 hexadecimal digits of the digest in the binary.
pub const MARKER: &str = "unbounded-agent sources sha256:";

/// The regular files of [`INPUTS`] under `workspace` (those missing skipped, and every name
/// starting with a dot), as `/`-separated paths relative to it, sorted.
pub fn files(workspace: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    let mut pending: Vec<PathBuf> = INPUTS.iter().map(|p| workspace.join(p)).collect();
    while let Some(path) = pending.pop() {
        let meta = match std::fs::metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                let entry = entry?;
                if !entry.file_name().to_string_lossy().starts_with('.') {
                    pending.push(entry.path());
                }
            }
        } else if meta.is_file() {
            let relative = path
                .strip_prefix(workspace)
                .map_err(|_| io::Error::other(format!("{} is outside the workspace", path.display())))?
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            found.push((relative, path));
        }
    }
    found.sort();
    Ok(found)
}

/// The SHA-256 (hex) over [`files`]: each file's relative path, its length and its bytes. The
/// same for every checkout of a commit: no absolute path, time or mode goes in.
pub fn compute(workspace: &Path) -> io::Result<String> {
    let mut hasher = Sha256::new();
    hasher.update(b"agent-sources-v1\0");
    for (relative, path) in files(workspace)? {
        let bytes =
            std::fs::read(&path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        hasher.update(relative.as_bytes());
        hasher.update([0]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(hex_string(&hasher.finalize()))
}

/// The digest that follows [`MARKER`] in `bytes` (a binary's contents), if any.
pub fn find_embedded(bytes: &[u8]) -> Option<String> {
    let marker = MARKER.as_bytes();
    let mut from = 0;
    while let Some(at) = find(&bytes[from..], marker) {
        let start = from + at + marker.len();
        let digits = bytes.get(start..start + 64)?;
        if digits
            .iter()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return Some(String::from_utf8_lossy(digits).into_owned());
        }
        from = start;
    }
    None
}

/// The first position of `needle` in `haystack`: a scan for its first byte, then a comparison.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut at = 0;
    while at + needle.len() <= haystack.len() {
        let next = haystack[at..].iter().position(|&b| b == first)?;
        at += next;
        if haystack.get(at..at + needle.len()) == Some(needle) {
            return Some(at);
        }
        at += 1;
    }
    None
}

fn hex_string(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace with a few agent sources, at `dir/<name>`.
    fn workspace(dir: &Path, name: &str) -> PathBuf {
        let root = dir.join(name);
        std::fs::create_dir_all(root.join("agent/src/cli")).unwrap();
        for (file, text) in [
            ("agent/src/lib.rs", "pub mod cli;"),
            ("agent/src/cli/mod.rs", "fn main() {}"),
            ("agent/Cargo.toml", "[package]"),
            ("Cargo.toml", "[workspace]"),
            ("Cargo.lock", "version = 4"),
        ] {
            std::fs::write(root.join(file), text).unwrap();
        }
        root
    }

    #[test]
    fn two_checkouts_of_the_same_sources_have_one_digest_and_any_change_moves_it() {
        let dir = tempfile::tempdir().unwrap();
        let a = workspace(dir.path(), "a");
        let b = workspace(dir.path(), "elsewhere/b");
        let digest = compute(&a).unwrap();
        assert_eq!(digest.len(), 64);
        assert_eq!(compute(&b).unwrap(), digest, "the checkout's path must not count");
        // Files that do not make the binary, and dotfiles, do not count either.
        std::fs::write(b.join("README.md"), "docs").unwrap();
        std::fs::write(b.join("agent/src/.lib.rs.swp"), "editor").unwrap();
        assert_eq!(compute(&b).unwrap(), digest);

        std::fs::write(b.join("agent/src/cli/mod.rs"), "fn main() { }").unwrap();
        let edited = compute(&b).unwrap();
        assert_ne!(edited, digest, "an edited source");
        std::fs::rename(b.join("agent/src/cli/mod.rs"), b.join("agent/src/cli/other.rs")).unwrap();
        assert_ne!(compute(&b).unwrap(), edited, "a renamed source");
        std::fs::create_dir_all(a.join("machina/src")).unwrap();
        std::fs::write(a.join("machina/src/lib.rs"), "pub struct Machine;").unwrap();
        let with_machina = compute(&a).unwrap();
        assert_ne!(with_machina, digest, "a workspace crate the agent uses");
        std::fs::remove_dir_all(a.join("machina")).unwrap();
        std::fs::write(a.join("Cargo.toml"), "[workspace]\n[profile.dev]").unwrap();
        assert_ne!(
            compute(&a).unwrap(),
            digest,
            "the workspace manifest (build profiles)"
        );
    }

    /// Every workspace crate the agent depends on (a `path = "../<dir>"` dependency outside
    /// `[dev-dependencies]`) is among the inputs, or an edit to it would keep a stale binary.
    #[test]
    fn the_inputs_hold_every_workspace_crate_the_agent_uses() {
        let manifest_dir =
            std::env::var("CARGO_MANIFEST_DIR").expect("cargo and nextest set CARGO_MANIFEST_DIR");
        let manifest = std::fs::read_to_string(Path::new(&manifest_dir).join("Cargo.toml")).unwrap();
        let used = manifest.split("[dev-dependencies]").next().unwrap();
        let crates: Vec<&str> = used
            .match_indices("path = \"../")
            .map(|(at, m)| {
                let rest = &used[at + m.len()..];
                &rest[..rest.find('"').unwrap()]
            })
            .collect();
        assert!(
            crates.contains(&"machina"),
            "agent/Cargo.toml names machina: {crates:?}"
        );
        for krate in crates {
            for input in [format!("{krate}/src"), format!("{krate}/Cargo.toml")] {
                assert!(INPUTS.contains(&input.as_str()), "{input} is not among INPUTS");
            }
        }
    }

    #[test]
    fn the_files_are_relative_sorted_and_slash_separated() {
        let dir = tempfile::tempdir().unwrap();
        let root = workspace(dir.path(), "w");
        let names: Vec<String> = files(&root).unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "Cargo.lock",
                "Cargo.toml",
                "agent/Cargo.toml",
                "agent/src/cli/mod.rs",
                "agent/src/lib.rs"
            ]
        );
    }

    #[test]
    fn the_embedded_digest_is_the_one_after_the_marker_with_64_hex_digits() {
        let digest = "0123456789abcdef".repeat(4);
        let mut binary = b"\x7fELF junk unbounded-agent sources sha256:%s decoy ".to_vec();
        binary.extend_from_slice(format!("{MARKER}{digest}\nmore").as_bytes());
        assert_eq!(find_embedded(&binary), Some(digest));
        assert_eq!(find_embedded(b"no marker here"), None);
        assert_eq!(find_embedded(format!("{MARKER}abc").as_bytes()), None);
        let upper = format!("{MARKER}{}", "AB".repeat(32));
        assert_eq!(find_embedded(upper.as_bytes()), None, "the digest is lower case");
    }
}
