#!/usr/bin/env bash
# Rehearses PR CI (.github/workflows/ci.yml) on this machine the way GitHub's runners run it:
# each job in a fresh clone of the committed HEAD with an empty HOME, only the tools its steps
# install, caches saved and restored by the workflow's own keys (GitHub's 10 GiB limit and
# eviction), artifacts passed between jobs as files, one job at a time. Prints each job's result
# and time and the caches' sizes; exits non-zero when a job did not pass. See docs/ci.md,
# "Rehearsing PR CI". Needs root (the jobs' labs) and what scripts/setup.sh checks for.
#
#   scripts/rehearse-ci.sh                        every job
#   scripts/rehearse-ci.sh --jobs lint            one job (and the jobs it needs)
#   scripts/rehearse-ci.sh --jobs test --matrix slug=daemon
#   scripts/rehearse-ci.sh --empty-caches         from empty caches, as a first run on GitHub
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"
cargo build --quiet --locked -p ci-rehearsal
exec "$CARGO_TARGET_DIR/debug/ci-rehearse" "$@"
