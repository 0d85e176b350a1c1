#!/usr/bin/env bash
# The README's test command: sets up a fresh machine, checks format and lints,
# builds the lab's images and artifacts, then runs every test in the workspace.
#
#   scripts/test.sh [NEXTEST ARGS...]          all of it, in order (what .ci/run runs)
#   scripts/test.sh --stage lint               setup, format and clippy only
#   scripts/test.sh --stage archive FILE       setup, build, images, then every test built once
#                                              into a nextest archive FILE
#   scripts/test.sh --stage run FILE [ARGS...] setup, images, then the tests of archive FILE
#                                              (e.g. -E 'binary(faults)'), no compiling
#
# PR CI (.github/workflows/ci.yml) runs the stages as separate jobs: lint once, archive once, and
# the run stage across a matrix of jobs, each a filterset of the default run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"

stage() { echo "==> [$(date +%T)] $*"; }
start=$(date +%s)

mode=all
archive=
if [[ "${1:-}" == "--stage" ]]; then
  mode="${2:?--stage needs lint, archive or run}"
  shift 2
  case "$mode" in
    lint) ;;
    archive | run)
      archive="${1:?--stage $mode needs the archive file}"
      shift
      ;;
    *)
      echo "scripts/test.sh: unknown stage '$mode' (lint, archive or run)" >&2
      exit 2
      ;;
  esac
fi

stage "setup"
scripts/setup.sh --for "$mode"

if [[ "$mode" == all || "$mode" == lint ]]; then
  stage "format"
  cargo fmt --all -- --check

  stage "clippy"
  cargo clippy --workspace --all-targets --locked -- -D warnings
fi

if [[ "$mode" == all || "$mode" == archive ]]; then
  stage "build"
  build_workspace
fi

if [[ "$mode" == run ]]; then
  # The archive holds the test binaries and the workspace's own binaries (the harness, the
  # agent it deploys); they are unpacked into a target directory of their own, which the
  # harness then uses as $CARGO_TARGET_DIR.
  extract="${RUNNER_TEMP:-${XDG_CACHE_HOME:-$HOME/.cache}}/unbounded/nextest-extract"
  stage "unpacking $archive into $extract"
  mkdir -p "$extract"
  cargo nextest list --archive-file "$archive" --workspace-remap "$REPO_ROOT" \
    --extract-to "$extract" --extract-overwrite >/dev/null
  export CARGO_TARGET_DIR="$extract/target"
fi

if [[ "$mode" != lint ]]; then
  stage "images and artifacts"
  "$CARGO_TARGET_DIR/debug/harness" images build
fi

case "$mode" in
  all)
    stage "tests"
    cargo nextest run --workspace --profile ci --locked "$@"
    ;;
  archive)
    stage "archive"
    cargo nextest archive --workspace --locked --archive-file "$archive"
    ;;
  run)
    stage "tests"
    cargo nextest run --archive-file "$archive" --workspace-remap "$REPO_ROOT" \
      --extract-to "$extract" --extract-overwrite --profile ci "$@"
    ;;
esac

stage "done in $(( $(date +%s) - start ))s"
