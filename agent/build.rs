//! Embeds the digest of the agent's sources (`src/source_digest.rs`) as the compile-time
//! variable `AGENT_SOURCES_SHA256`: `unbounded-agent --version` prints it, and the harness
//! refuses to deploy a binary whose digest is not the checkout's.

use std::path::Path;

#[allow(dead_code)]
#[path = "src/source_digest.rs"]
mod source_digest;

fn main() {
    // Read when the script runs: cargo reuses a compiled build script for another checkout.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let workspace = Path::new(&manifest)
        .parent()
        .expect("agent/ lies in the workspace");
    for input in source_digest::INPUTS {
        println!("cargo::rerun-if-changed={}", workspace.join(input).display());
    }
    let digest = source_digest::compute(workspace).unwrap_or_else(|e| {
        panic!(
            "the digest of the agent's sources under {}: {e}",
            workspace.display()
        )
    });
    println!("cargo::rustc-env=AGENT_SOURCES_SHA256={digest}");
}
