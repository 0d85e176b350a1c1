#!/usr/bin/env bash
# Installs what the project needs on a Debian 12 machine, idempotently: Debian packages
# (QEMU, mmdebstrap, nftables, ...), a pinned cargo-nextest and actionlint. It does not
# install the two toolchains; it checks them first and stops naming what is missing.
#
#   scripts/setup.sh [--for all|lint|archive|run]
#
# Each stage of scripts/test.sh asks only for what it uses (PR CI's lint job has no Go):
#   lint     Rust with rustfmt and clippy
#   archive  that, root, Go, the Debian packages and cargo-nextest (build, images, the archive)
#   run      that and actionlint (the tests; one of them lints the workflow)
#   all      everything (the default; what scripts/test.sh without --stage runs)
#
# What it checks:
#   * Rust >= the workspace's rust-version (Cargo.toml; edition 2024), cargo on PATH
#     (rustup's ~/.cargo/bin is added by env.sh);
#   * Go >= 1.21, as /usr/local/go/bin/go or on PATH; best the version the recipes in images/
#     pin (GO_TOOLCHAIN in images/*/recipe.env), else Go fetches that one from its module proxy.
# and that it runs as root (the packages, and later the lab's namespaces and VMs).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

fail() { echo "setup: $*" >&2; exit 1; }

want=all
if [[ "${1:-}" == "--for" ]]; then
  want="${2:?--for needs all, lint, archive or run}"
  case "$want" in
    all | lint | archive | run) ;;
    *) fail "unknown stage '$want' (all, lint, archive or run)" ;;
  esac
fi

# "1.89" <= "1.95.0"?
version_at_least() { [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" == "$1" ]]; }

RUST_MIN=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$REPO_ROOT/Cargo.toml")
{ command -v cargo >/dev/null && command -v rustc >/dev/null; } ||
  fail "Rust is missing: install Rust >= $RUST_MIN (e.g. rustup, https://rustup.rs: \
curl --proto '=https' -sSf https://sh.rustup.rs | sh -s -- -y), then run this again"
RUST_HAVE=$(rustc --version | awk '{print $2}')
version_at_least "$RUST_MIN" "$RUST_HAVE" ||
  fail "Rust $RUST_HAVE is too old: the workspace needs >= $RUST_MIN (edition 2024); \
\`rustup update stable\`"
rustup_components=$(rustup component list --installed 2>/dev/null || true)
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    fail "cargo ${component/rustfmt/fmt} is missing: \`rustup component add $component\` \
(installed components: ${rustup_components//$'\n'/ })"
  fi
done

[[ "$want" == lint ]] && exit 0

[[ $EUID -eq 0 ]] || fail "must run as root (it installs Debian packages; the lab needs root too)"

GO_WANT=$(sed -n 's/^GO_TOOLCHAIN=go//p' "$REPO_ROOT/images/coredns/recipe.env")
GO_MIN=1.21
command -v go >/dev/null ||
  fail "Go is missing: install Go $GO_WANT as /usr/local/go (https://go.dev/dl/go$GO_WANT.linux-amd64.tar.gz); \
the recipes in images/ build CoreDNS, Kubernetes, etcd and actionlint with it"
GO_HAVE=$(go version | awk '{print $3}' | sed 's/^go//')
version_at_least "$GO_MIN" "$GO_HAVE" ||
  fail "Go $GO_HAVE ($(command -v go)) is too old: the recipes in images/ pin go$GO_WANT (GOTOOLCHAIN), \
which needs Go >= $GO_MIN to switch to; install Go $GO_WANT as /usr/local/go (https://go.dev/dl/)"
if [[ "$GO_HAVE" != "$GO_WANT" ]]; then
  echo "==> note: Go $GO_HAVE found; the image builds will fetch go$GO_WANT (pinned in images/) from the Go module proxy"
fi

NEXTEST_VERSION=0.9.151
APT_PACKAGES=(
  qemu-system-x86 qemu-utils mmdebstrap debian-archive-keyring
  nftables conntrack iproute2 dnsutils curl zstd e2fsprogs fakeroot
  shellcheck
  gcc libc6-dev busybox-static
  python3
)
# The Kind cluster's container engine: Docker where its daemon runs (Kind's nodes then run there;
# installing runc beside Docker's containerd.io would remove it), else Podman with Debian's runc
# (the lab writes its own containers.conf; nothing goes to /etc).
if ! docker info >/dev/null 2>&1; then
  APT_PACKAGES+=(podman runc)
fi

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
  # An unoptimised build without debug info (a test runner spends its time waiting) and without
  # the default features: `self-update` (rustls on aws-lc-rs, a C build, and an HTTP client; we
  # pin the version instead) and `usdt` (DTrace probes): 3.7 CPU-minutes (docs/perf.md, CI budget).
  echo "==> installing cargo-nextest $NEXTEST_VERSION (a debug build, ~2-4 min on 2 cores)"
  CARGO_PROFILE_DEV_DEBUG=false cargo install --locked --debug --no-default-features \
    "cargo-nextest@$NEXTEST_VERSION"
fi

[[ "$want" == archive ]] && exit 0

# actionlint, for the test that lints .github/workflows/ (built from its Go module).
"$(dirname "${BASH_SOURCE[0]}")/install-actionlint.sh"
