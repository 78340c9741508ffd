#!/usr/bin/env bash
# Installs the Kubernetes pieces the tests need (internal/kubetest,
# internal/nodetest and their users) on a fresh Debian machine, as root:
#   - etcd from Debian's etcd-server package (never left running as a service);
#   - kube-apiserver, kube-controller-manager, kube-scheduler and kubelet,
#     built from the Go module proxy through the wrapper module in
#     test/kube/cluster into a cache directory keyed by version. The missing
#     ones are built by ONE `go build` (they share most packages: on this
#     2-core machine that is minutes less than four builds).
# Idempotent: when everything is present it only prints where it is.
# Prints "etcd=<path>" and "<binary>=<path>" lines last.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wrapper="$here/../test/kube/cluster"
# The version is the one the wrapper module requires.
KUBE_VERSION="$(awk '$1 == "k8s.io/kubernetes" { print $2 }' "$wrapper/go.mod")"
[ -n "$KUBE_VERSION" ] || { echo "no k8s.io/kubernetes requirement in $wrapper/go.mod" >&2; exit 1; }
KUBE_CACHE="${KUBE_CACHE:-$HOME/.cache/patchbay/kube-$KUBE_VERSION}"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet)

if [ "$(id -u)" != 0 ]; then
	echo "kube-deps.sh must run as root (it installs Debian packages)" >&2
	exit 1
fi

# shellcheck source=apt.sh
. "$here/apt.sh"

# The packaged etcd service runs as the package's etcd user (its init script
# starts it so); tests run their own etcd as root.
etcd_is_service() { [ "$(stat -c %U "/proc/$1" 2>/dev/null)" = etcd ]; }

apt_install_no_services /usr/bin/etcd etcd_is_service etcd.service etcd-server

# The binaries are what the wrapper module's requirements build: a changed
# go.mod/go.sum (a pin moved) makes every cached binary stale.
want_sum="$(cat "$wrapper/go.mod" "$wrapper/go.sum" | sha256sum | cut -c1-16)"
if [ -d "$KUBE_CACHE" ] && [ "$(cat "$KUBE_CACHE/.wrapper-sum" 2>/dev/null)" != "$want_sum" ]; then
	for b in "${BINARIES[@]}"; do rm -f "$KUBE_CACHE/$b"; done
fi
missing=()
for b in "${BINARIES[@]}"; do
	[ -x "$KUBE_CACHE/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "building ${missing[*]} $KUBE_VERSION into $KUBE_CACHE (cold: several minutes and ~3 GB of Go build cache)"
	mkdir -p "$KUBE_CACHE"
	# Build into a temporary directory beside the cache, then rename each
	# binary into place: an interrupted build never looks cached. Leftovers of
	# an interrupted run are removed first.
	rm -rf "$KUBE_CACHE"/.build-*
	tmp="$(mktemp -d "$KUBE_CACHE/.build-XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	start=$(date +%s)
	# Stamp the version as kubernetes' own build does (else "v0.0.0-master").
	v="${KUBE_VERSION#v}" ldflags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=${v%%.*} -X $pkg.gitMinor=$(echo "$v" | cut -d. -f2) -X $pkg.gitTreeState=clean"
	done
	pkgs=()
	for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
	(cd "$wrapper" && go build -trimpath -ldflags="$ldflags" -o "$tmp/" "${pkgs[@]}")
	for b in "${missing[@]}"; do
		mv "$tmp/$b" "$KUBE_CACHE/$b"
	done
	echo "$want_sum" >"$KUBE_CACHE/.wrapper-sum"
	echo "built ${missing[*]} in $(($(date +%s) - start)) s"
fi

echo "etcd=$(command -v etcd)"
for b in "${BINARIES[@]}"; do
	echo "$b=$KUBE_CACHE/$b"
done
