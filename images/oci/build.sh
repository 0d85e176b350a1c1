#!/bin/sh
# Builds the programs of the lab's OCI images into $1/: `pause` (Kubernetes'
# build/pause/linux/pause.c from the pinned k8s.io/kubernetes module, static)
# and `busybox` (a copy of the host's Debian busybox-static binary).
# Usage: build.sh OUT_DIR   (GO may name the go binary; default: go on PATH)
# The harness packs them into OCI image archives (harness/src/images/oci.rs).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/recipe.env"
out=$(mkdir -p "$1" && cd "$1" && pwd)
go=${GO:-go}
export GOTOOLCHAIN=local GOFLAGS="" GOWORK=off

# The module's source from the Go module cache (downloaded through the proxy if missing).
dir=$("$go" mod download -json "k8s.io/kubernetes@v$PAUSE_MODULE_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
src="$dir/build/pause/linux/pause.c"
test -f "$src" || { echo "no $src (go mod download k8s.io/kubernetes@v$PAUSE_MODULE_VERSION)" >&2; exit 1; }
echo "$PAUSE_C_SHA256  $src" | sha256sum -c -
gcc --version | head -n 1
# As build/pause/Makefile: -Os -Wall -Werror -static -DVERSION=v$(TAG)-$(REV).
gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-k8s-v$PAUSE_MODULE_VERSION" \
    -o "$out/pause" "$src"
strip "$out/pause"
"$out/pause" -v

test -x /bin/busybox || { echo "no /bin/busybox: install Debian's busybox-static (scripts/setup.sh)" >&2; exit 1; }
dpkg-query -W busybox-static
cp /bin/busybox "$out/busybox"
"$out/busybox" | head -n 1
ls -l "$out"
