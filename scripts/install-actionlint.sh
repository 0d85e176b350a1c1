#!/usr/bin/env bash
# Installs actionlint (the GitHub Actions workflow linter the test suite runs on
# .github/workflows/) from its Go module at a pinned version into
# $LAB_CACHE_DIR/tools/bin, only when that exact version is missing. Quiet when installed.
# Needs Go >= 1.21 (as scripts/setup.sh checks): actionlint v1.7.12's go.mod says go 1.25.0, and
# an older go command (1.21 or later, GOTOOLCHAIN=auto) fetches that toolchain itself.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

ACTIONLINT_VERSION=v1.7.12
BIN_DIR="$LAB_CACHE_DIR/tools/bin"

if [[ -x "$BIN_DIR/actionlint" ]] && [[ "$("$BIN_DIR/actionlint" -version 2>/dev/null | head -n1)" == "$ACTIONLINT_VERSION" ]]; then
  exit 0
fi
if ! command -v go >/dev/null; then
  echo "install-actionlint: go not found (expected /usr/local/go/bin/go); install Go >= 1.21 first, best the version scripts/setup.sh names (actionlint $ACTIONLINT_VERSION needs go 1.25, which Go >= 1.21 fetches itself)" >&2
  exit 1
fi
echo "==> installing actionlint $ACTIONLINT_VERSION into $BIN_DIR"
mkdir -p "$BIN_DIR"
CGO_ENABLED=0 GOBIN="$BIN_DIR" go install -trimpath \
  "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
