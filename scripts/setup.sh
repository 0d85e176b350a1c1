#!/usr/bin/env bash
# Installs what the project needs on a fresh Debian machine, idempotently:
# Debian packages (QEMU, mmdebstrap, nftables, ...) and a pinned cargo-nextest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

NEXTEST_VERSION=0.9.151
APT_PACKAGES=(
  qemu-system-x86 qemu-utils mmdebstrap debian-archive-keyring
  nftables conntrack iproute2 dnsutils curl zstd e2fsprogs fakeroot
  shellcheck
  gcc libc6-dev busybox-static
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "==> installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! cargo nextest --version 2>/dev/null | grep -q "cargo-nextest $NEXTEST_VERSION"; then
  echo "==> installing cargo-nextest $NEXTEST_VERSION"
  cargo install --locked "cargo-nextest@$NEXTEST_VERSION"
fi

# actionlint, for the test that lints .github/workflows/ (built from its Go module).
"$(dirname "${BASH_SOURCE[0]}")/install-actionlint.sh"
