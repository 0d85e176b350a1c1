#!/usr/bin/env bash
# Runs end-to-end scenarios with the caches everything else uses: builds the workspace as the
# tests do (the agent binary the harness deploys into the VM, so it is never stale and its
# checkpoints are the ones scripts/test.sh builds and resumes, and the scenario tests), then runs
# the scenarios with `cargo nextest run` and the arguments given: over the workspace as built
# (`-p scenarios` would build the agent library again with other features), each `-E` filter
# narrowed to `package(scenarios)`. `--no-capture` shows each scenario's progress live and runs
# one test at a time (nextest's rule); several scenarios on both VM lanes: scripts/test.sh -E '…'.
# Needs root, the images
# (`harness images build`, or scripts/lab-up.sh / scripts/test.sh once) and cargo-nextest
# (scripts/setup.sh). Examples:
#   scripts/scenario.sh --test resumed_node
#   SCENARIO_CHECK=metrics scripts/scenario.sh --test resumed_node -E 'test(/localdns$/)'
#   scripts/scenario.sh -E 'test(/localdns_offline$/)'
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"

if [[ $# -eq 0 ]]; then
  echo "usage: scripts/scenario.sh <cargo nextest run arguments>, e.g. --test resumed_node" >&2
  names=(scenarios/tests/*.rs)
  names=("${names[@]#scenarios/tests/}")
  echo "       the scenario test binaries: ${names[*]%.rs}" >&2
  exit 2
fi
# The arguments with every `-E`/`--filterset` filter (nextest takes their union) folded into one
# that also names the scenarios package.
filters=() rest=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -E | --filterset | --filter-expr)
      [[ $# -ge 2 ]] || { echo "scripts/scenario.sh: $1 needs a filter expression" >&2; exit 2; }
      filters+=("($2)"); shift 2 ;;
    --filterset=* | --filter-expr=*) filters+=("(${1#*=})"); shift ;;
    *) rest+=("$1"); shift ;;
  esac
done
filter="package(scenarios)"
if [[ ${#filters[@]} -gt 0 ]]; then
  union=$(printf ' | %s' "${filters[@]}")
  filter="$filter & (${union# | })"
fi
echo "==> building the workspace as the tests do (target $CARGO_TARGET_DIR)"
build_workspace
echo "==> cargo nextest run --workspace -E '$filter' ${rest[*]}"
exec cargo nextest run --locked --workspace --no-capture -E "$filter" "${rest[@]}"
