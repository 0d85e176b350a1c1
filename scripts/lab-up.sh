#!/usr/bin/env bash
# The README's main command: prepares the machine, builds the harness and the
# agent (the same debug build the tests use, so they share one cache), builds
# the lab's images, then runs `harness lab up` (a lab with one VM, kept until
# Ctrl-C or `harness lab down`). Arguments go to `harness lab up`, e.g.
#   scripts/lab-up.sh node-configs/localdns-off.json
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"

stage() { echo "==> [$(date +%T)] $*"; }

stage "setup"
scripts/setup.sh

stage "build (debug, shared with the tests)"
cargo build --workspace --locked

stage "images and artifacts"
"$CARGO_TARGET_DIR/debug/harness" images build

stage "lab up"
exec "$CARGO_TARGET_DIR/debug/harness" lab up "$@"
