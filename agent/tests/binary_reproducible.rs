//! The agent binary is the same for every checkout of a commit: it holds no path of the checkout
//! (joined-node checkpoints are keyed by the binary's SHA-256, docs/lab.md); and it carries the
//! digest of the sources it was built from, which the harness checks before deploying it.

use std::path::Path;

/// The agent binary built for these tests (where nextest unpacked it, in an archive run).
fn binary() -> std::path::PathBuf {
    agent::test_binary!("unbounded-agent")
}

/// The workspace holding `agent/`.
fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("agent/ has a parent: the workspace")
}

fn binary_bytes() -> Vec<u8> {
    std::fs::read(binary()).unwrap_or_else(|e| panic!("reading {}: {e}", binary().display()))
}

#[test]
fn the_agent_binary_holds_no_path_of_the_checkout() {
    let (binary, checkout, bytes) = (binary(), workspace(), binary_bytes());
    let needle = checkout.to_string_lossy();
    let needle_bytes = needle.as_bytes();
    if let Some(at) = bytes.windows(needle_bytes.len()).position(|w| w == needle_bytes) {
        let end = (at + 120).min(bytes.len());
        panic!(
            "{} holds the checkout's path {needle} at byte {at} ({:?}); debug info of a workspace \
             crate? (Cargo.toml: [profile.dev.package.agent] debug = false)",
            binary.display(),
            String::from_utf8_lossy(&bytes[at..end])
        );
    }
}

/// The binary embeds the digest of the sources it was built from (`agent::source_digest`, by
/// `build.rs`), the digest of this workspace, and `--version` prints it: what the harness checks
/// before it deploys the binary.
#[test]
fn the_agent_binary_carries_the_digest_of_the_workspaces_agent_sources() {
    let binary = binary();
    let want = agent::source_digest::compute(workspace()).expect("the workspace's agent sources");
    let bytes = binary_bytes();
    assert_eq!(
        agent::source_digest::find_embedded(&bytes).as_deref(),
        Some(want.as_str()),
        "{} does not embed the digest of {}'s agent sources",
        binary.display(),
        workspace().display()
    );
    let out = std::process::Command::new(binary)
        .arg("--version")
        .output()
        .expect("running unbounded-agent --version");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(&format!("{}{want}", agent::source_digest::MARKER)),
        "--version printed {text:?}"
    );
}
