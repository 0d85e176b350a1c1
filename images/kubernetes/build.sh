#!/bin/sh
# Builds the Kubernetes control plane and node binaries (kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, kubelet, kubectl, kubeadm) and etcd from
# their published Go modules at the versions pinned in recipe.env, statically
# (CGO_ENABLED=0, -trimpath, stripped), into $1/.
# Usage: build.sh OUT_DIR   (GO may name the go binary; default: go on PATH)
#
# Neither k8s.io/kubernetes nor go.etcd.io/etcd/server/v3 can be built with
# `go install module@version`: their go.mod files replace sibling modules with
# local paths. Each is built through a throwaway wrapper module that requires
# it and replaces every such sibling with its published version; the replace
# list is generated from the module's own go.mod, not written by hand.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/recipe.env"
out=$(mkdir -p "$1" && cd "$1" && pwd)
go=${GO:-go}
export CGO_ENABLED=0 GOTOOLCHAIN="$GO_TOOLCHAIN" GOFLAGS="" GOWORK=off
"$go" version
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# wrap DIR MODULE VERSION SIBLING_VERSION: a wrapper module in DIR requiring
# MODULE@VERSION, with `replace X => X SIBLING_VERSION` for every module X
# that MODULE's go.mod replaces with a local path (`=> ./...` or `=> ../...`).
wrap() {
    mkdir -p "$1"
    cd "$1"
    "$go" mod init "unbounded.local/$(basename "$1")-build"
    gomod=$("$go" mod download -json "$2@$3" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
    test -s "$gomod" || { echo "no go.mod for $2@$3 (go mod download -json)" >&2; exit 1; }
    # Module-path lines of the form `X => ./path` (inside a block or after `replace`).
    # etcd also points a few forbidden imports at a missing ./FORBIDDEN_DEPENDENCY: not siblings.
    siblings=$(grep -v FORBIDDEN_DEPENDENCY "$gomod" |
        sed -n 's/^\(replace\)\{0,1\}[[:space:]]*\([^[:space:]]*\)[[:space:]]*=>[[:space:]]*\.\{1,2\}\/.*/\2/p')
    test -n "$siblings" || { echo "$2@$3: go.mod replaces no module with a local path" >&2; exit 1; }
    for m in $siblings; do
        "$go" mod edit -replace="$m=$m@$4"
    done
    echo "$2@$3: replacing $(echo "$siblings" | wc -l) sibling modules at $4" >&2
    # The main module decides the go version and GODEBUG defaults: take MODULE's.
    gover=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")
    "$go" mod edit -go="$gover" -require="$2@$3"
    godebug=$(sed -n 's/^godebug \(.*\)$/\1/p' "$gomod")
    if [ -n "$godebug" ]; then "$go" mod edit -godebug="$godebug"; fi
}

# Kubernetes: one `go build` for all seven commands.
k8s_pkgs="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubelet
k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubeadm"
wrap "$work/kubernetes" k8s.io/kubernetes "v$KUBERNETES_VERSION" "v$KUBERNETES_STAGING_VERSION"
# shellcheck disable=SC2046 # package lists split on purpose
"$go" get $(for p in $k8s_pkgs; do printf '%s@v%s ' "$p" "$KUBERNETES_VERSION"; done)
major=${KUBERNETES_VERSION%%.*}
minor=${KUBERNETES_VERSION#*.}
minor=${minor%%.*}
build_date=$(date -u -d "@$KUBERNETES_SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=v$KUBERNETES_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
# shellcheck disable=SC2086
"$go" build -trimpath -ldflags="$ldflags" -o "$out/" $k8s_pkgs

# etcd: its server module's main package is the `etcd` command.
wrap "$work/etcd" go.etcd.io/etcd/server/v3 "v$ETCD_VERSION" "v$ETCD_VERSION"
"$go" get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
"$go" build -trimpath -ldflags="-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
ls -l "$out"
