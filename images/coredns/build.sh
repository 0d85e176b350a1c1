#!/bin/sh
# Builds CoreDNS from its published Go module at the version pinned in
# recipe.env, statically (CGO_ENABLED=0, -trimpath, stripped), into $1/coredns.
# Usage: build.sh OUT_DIR   (GO may name the go binary; default: go on PATH)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/recipe.env"
out=$(mkdir -p "$1" && cd "$1" && pwd)
go=${GO:-go}
export CGO_ENABLED=0 GOTOOLCHAIN="$GO_TOOLCHAIN" GOFLAGS=
module=github.com/coredns/coredns
"$go" version
if GOBIN="$out" "$go" install -trimpath -ldflags="-s -w" "$module@v$COREDNS_VERSION"; then
    exit 0
fi
# `go install module@version` refuses modules whose go.mod has replace
# directives; build through a throwaway wrapper module instead.
echo "go install failed; building through a wrapper module" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$go" mod init unbounded.local/coredns-build
"$go" get "$module@v$COREDNS_VERSION"
"$go" build -trimpath -ldflags="-s -w" -o "$out/coredns" "$module"
