#!/bin/sh
# Builds `kind` from its published Go module at the version pinned in recipe.env
# (CGO_ENABLED=0, -trimpath, stripped) into $1/bin/, and copies the Kind base
# image's files (images/base/files of the same module: the node container's
# entrypoint, its containerd and kubelet units) into $1/base-files/, with crictl
# (sigs.k8s.io/cri-tools at CRICTL_VERSION) in its usr/local/bin/.
# Usage: build.sh OUT_DIR   (GO may name the go binary; default: go on PATH)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/recipe.env"
out=$(mkdir -p "$1" && cd "$1" && pwd)
go=${GO:-go}
export CGO_ENABLED=0 GOTOOLCHAIN="$GO_TOOLCHAIN" GOFLAGS="" GOWORK=off
"$go" version
GOBIN="$out/bin" "$go" install -trimpath -ldflags="-s -w" "sigs.k8s.io/kind@v$KIND_VERSION"
"$out/bin/kind" version

# The module's source from the Go module cache (downloaded through the proxy if missing).
dir=$("$go" mod download -json "sigs.k8s.io/kind@v$KIND_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
files="$dir/images/base/files"
test -f "$files/usr/local/bin/entrypoint" || { echo "no $files/usr/local/bin/entrypoint" >&2; exit 1; }
mkdir -p "$out/base-files"
cp -R "$files/." "$out/base-files/"
# The module cache is read-only and a module zip keeps no modes: the copy is the entry's own,
# and the scripts get back the execute bit they have in the repository.
chmod -R u+w "$out/base-files"
chmod 0755 "$out/base-files/usr/local/bin/"* "$out/base-files/kind/bin/"*

# crictl into the base files (its version string set as cri-tools' own release build sets it).
GOBIN="$out/base-files/usr/local/bin" "$go" install -trimpath \
    -ldflags="-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=v$CRICTL_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@v$CRICTL_VERSION"
"$out/base-files/usr/local/bin/crictl" --version
find "$out/base-files" -type f | sort
