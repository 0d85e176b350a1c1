# Shared environment of the project's scripts: caches live outside the repository.
# Sourced, not run.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/unbounded/target}"
export LAB_CACHE_DIR="${LAB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/unbounded-lab}"
export GOCACHE="${GOCACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/go-build}"
export GOMODCACHE="${GOMODCACHE:-$HOME/go/pkg/mod}"
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export REPO_ROOT
export LAB_ARTIFACTS_DIR="${LAB_ARTIFACTS_DIR:-$REPO_ROOT/target/lab-artifacts}"

# The one build of the workspace every script runs: the agent binary depends on which packages
# and targets cargo builds together (features are unified across them), and the joined-node
# checkpoints are keyed by that binary's SHA-256, so the tests, the scenarios and `lab up` build
# the same way and resume each other's checkpoints.
build_workspace() {
  cargo build --workspace --all-targets --locked
}
