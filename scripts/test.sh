#!/usr/bin/env bash
# The README's test command: sets up a fresh machine, checks format and lints,
# builds the lab's images and artifacts, then runs every test in the workspace.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"

stage() { echo "==> [$(date +%T)] $*"; }
start=$(date +%s)

stage "setup"
scripts/setup.sh

stage "format"
cargo fmt --all -- --check

stage "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

stage "build"
cargo build --workspace --all-targets --locked

stage "images and artifacts"
"$CARGO_TARGET_DIR/debug/harness" images build

stage "tests"
cargo nextest run --workspace --profile ci --locked "$@"

stage "done in $(( $(date +%s) - start ))s"
