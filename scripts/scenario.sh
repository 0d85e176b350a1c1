#!/usr/bin/env bash
# Runs end-to-end scenarios with the caches everything else uses: builds the workspace as the
# tests do (the agent binary the harness deploys into the VM, so it is never stale and its
# checkpoints are the ones scripts/test.sh builds and resumes, and the scenario tests), then runs
# `cargo nextest run -p scenarios` with the arguments given. Needs root, the images
# (`harness images build`, or scripts/lab-up.sh / scripts/test.sh once) and cargo-nextest
# (scripts/setup.sh). Examples:
#   scripts/scenario.sh --test metrics
#   scripts/scenario.sh --test dns_wiring -E 'test(/localdns$/)'
#   scripts/scenario.sh -E 'test(/localdns_offline$/)'
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"

if [[ $# -eq 0 ]]; then
  echo "usage: scripts/scenario.sh <cargo nextest run arguments>, e.g. --test metrics" >&2
  names=(scenarios/tests/*.rs)
  names=("${names[@]#scenarios/tests/}")
  echo "       the scenario test binaries: ${names[*]%.rs}" >&2
  exit 2
fi
echo "==> building the workspace as the tests do (target $CARGO_TARGET_DIR)"
build_workspace
exec cargo nextest run --locked -p scenarios --no-capture "$@"
