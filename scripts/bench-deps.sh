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

# Multus v4.3.0 (thin plugin, thick daemon and shim): multinet's peer in
# the node workload, built from the Go module proxy through the wrapper
# module test/multus into a cache keyed by version. Never a product
# dependency. Cold: a few minutes (its modules and a build); cached: nothing.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
multus_mod=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
MULTUS_VERSION="$(awk -v m="$multus_mod" '$1 == m { print $2 }' "$here/../test/multus/go.mod")"
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
