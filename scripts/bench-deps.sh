#!/usr/bin/env bash
# Installs what `make bench` needs beyond `make test-deps`: Debian's
# containernetworking-plugins (1.1.1 in /usr/lib/cni), the baseline the
# performance targets are stated against. Run as root.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "make bench must run as root (it creates network namespaces)" >&2
	exit 1
fi
if [ ! -x /usr/lib/cni/bridge ] || [ ! -x /usr/lib/cni/host-local ]; then
	echo "installing Debian containernetworking-plugins into /usr/lib/cni"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends containernetworking-plugins >/dev/null
fi
dpkg-query -W -f='debian containernetworking-plugins ${Version}\n' containernetworking-plugins

# whereabouts, the cluster-IPAM peer (measured against, never a product
# dependency): built from the Go module proxy through the wrapper module
# test/whereabouts into ~/.cache/patchbay/whereabouts-<version>/, with its
# CRDs copied from the module itself (they are in the module zip).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wb_mod="$here/../test/whereabouts"
WB_VERSION="$(awk -v m=github.com/k8snetworkplumbingwg/whereabouts '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' "$wb_mod/go.mod")"
[ -n "$WB_VERSION" ] || { echo "no whereabouts requirement in $wb_mod/go.mod" >&2; exit 1; }
WB_CACHE="${WB_CACHE:-$HOME/.cache/patchbay/whereabouts-$WB_VERSION}"
if [ ! -x "$WB_CACHE/whereabouts" ] || ! ls "$WB_CACHE"/crds/*.yaml >/dev/null 2>&1; then
	echo "building whereabouts $WB_VERSION into $WB_CACHE (the first build takes a few minutes)"
	mkdir -p "$WB_CACHE/crds"
	(cd "$wb_mod" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$WB_CACHE/whereabouts.new" github.com/k8snetworkplumbingwg/whereabouts/cmd)
	mv "$WB_CACHE/whereabouts.new" "$WB_CACHE/whereabouts"
	wb_dir="$(cd "$wb_mod" && go list -m -f '{{.Dir}}' github.com/k8snetworkplumbingwg/whereabouts)"
	cp "$wb_dir"/doc/crds/whereabouts.cni.cncf.io_*.yaml "$WB_CACHE/crds/"
fi
echo "whereabouts $WB_VERSION: $WB_CACHE/whereabouts"

# Multus v4.3.0 (thin plugin, thick daemon and shim): multinet's peer in
# the node workload, built from the Go module proxy through the wrapper
# module test/multus into a cache keyed by version. Never a product
# dependency. Cold: a few minutes (its modules and a build); cached: nothing.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
multus_mod=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
# The requirement line, in a require block or on its own ("require m v").
MULTUS_VERSION="$(awk -v m="$multus_mod" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' "$here/../test/multus/go.mod")"
[ -n "$MULTUS_VERSION" ] || { echo "no $multus_mod requirement in test/multus/go.mod" >&2; exit 1; }
MULTUS_CACHE="${MULTUS_CACHE:-$HOME/.cache/patchbay/multus-$MULTUS_VERSION}"
multus_bins=(multus multus-daemon multus-shim)
missing=()
for b in "${multus_bins[@]}"; do
	[ -x "$MULTUS_CACHE/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "building Multus ${missing[*]} $MULTUS_VERSION into $MULTUS_CACHE"
	mkdir -p "$MULTUS_CACHE"
	rm -rf "$MULTUS_CACHE"/.build-*
	tmp="$(mktemp -d "$MULTUS_CACHE/.build-XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	start=$(date +%s)
	pkgs=()
	for b in "${missing[@]}"; do pkgs+=("$multus_mod/cmd/$b"); done
	(cd "$here/../test/multus" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/" "${pkgs[@]}")
	for b in "${missing[@]}"; do mv "$tmp/$b" "$MULTUS_CACHE/$b"; done
	echo "built Multus in $(($(date +%s) - start)) s"
fi
echo "multus=$MULTUS_CACHE"
