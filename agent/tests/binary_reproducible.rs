//! The agent binary is the same for every checkout of a commit: it holds no path of the checkout
//! (joined-node checkpoints are keyed by the binary's SHA-256, docs/lab.md).

use std::path::Path;

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while let Some(at) = haystack[from..].iter().position(|b| *b == first) {
        let start = from + at;
        if haystack[start + 1..].starts_with(rest) {
            return Some(start);
        }
        from = start + 1;
    }
    None
}

#[test]
fn the_agent_binary_holds_no_path_of_the_checkout() {
    let binary = Path::new(env!("CARGO_BIN_EXE_unbounded-agent"));
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("agent/ has a parent: the workspace");
    let bytes = std::fs::read(binary).unwrap_or_else(|e| panic!("reading {}: {e}", binary.display()));
    let needle = checkout.to_string_lossy();
    if let Some(at) = find(&bytes, needle.as_bytes()) {
        let end = (at + 120).min(bytes.len());
        panic!(
            "{} holds the checkout's path {needle} at byte {at} ({:?}); debug info of a workspace \
             crate? (Cargo.toml: [profile.dev.package.agent] debug = false)",
            binary.display(),
            String::from_utf8_lossy(&bytes[at..end])
        );
    }
}

#[test]
fn the_search_finds_a_path_that_is_there() {
    assert_eq!(find(b"xx/work/main/agent", b"/work/main"), Some(2));
    assert_eq!(find(b"/work/mai", b"/work/main"), None);
    assert_eq!(find(b"//work/main", b"/work/main"), Some(1));
}
