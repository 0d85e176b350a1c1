#!/usr/bin/env bash
# The README's main command: prepares the machine, builds the workspace as the
# tests do (one cache, and the same agent binary, so the same node checkpoints), builds
# the lab's images and artifacts, then runs `harness lab up`: a lab with its
# control plane and one VM, the agent deployed into it and started, waiting
# until the Node is Ready (LocalDNS running in its machine), then printing how
# to get a shell into the VM and its machine and the admin kubeconfig's path.
# It returns then; the lab stays until `harness lab down` (`--foreground` holds the terminal
# until Ctrl-C instead). Arguments go to `harness lab up`, e.g.
#   scripts/lab-up.sh node-configs/localdns-off.json
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"

stage() { echo "==> [$(date +%T)] $*"; }

stage "setup"
scripts/setup.sh

stage "build (debug, shared with the tests)"
build_workspace

stage "images and artifacts"
"$CARGO_TARGET_DIR/debug/harness" images build

stage "lab up"
exec "$CARGO_TARGET_DIR/debug/harness" lab up "$@"
