#!/usr/bin/env bash
# Installs what `make test` needs on a fresh Debian machine (run as root):
# Debian packages, and the reference CNI plugins and cnitool built with
# `go install` into a cache directory (skipped when already there).
set -euo pipefail

: "${REF_BIN:?}" "${REF_PLUGINS_VERSION:?}" "${CNITOOL_VERSION:?}"

if [ "$(id -u)" != 0 ]; then
	echo "make test must run as root (it creates network namespaces)" >&2
	exit 1
fi

need_pkgs=()
command -v ip >/dev/null || need_pkgs+=(iproute2)
command -v nft >/dev/null || need_pkgs+=(nftables)
command -v iptables >/dev/null || need_pkgs+=(iptables)
command -v ping >/dev/null || need_pkgs+=(iputils-ping)
command -v strace >/dev/null || need_pkgs+=(strace)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	echo "installing Debian packages: ${need_pkgs[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

mkdir -p "$REF_BIN"
ref_plugins=(
	main/bridge main/ptp main/macvlan main/ipvlan main/vlan main/host-device main/tap main/dummy main/loopback
	ipam/host-local ipam/static ipam/dhcp
	meta/tuning meta/portmap meta/bandwidth meta/firewall meta/sbr meta/vrf
)
missing=()
for p in "${ref_plugins[@]}"; do
	[ -x "$REF_BIN/$(basename "$p")" ] || missing+=("github.com/containernetworking/plugins/plugins/$p@$REF_PLUGINS_VERSION")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing reference plugins $REF_PLUGINS_VERSION into $REF_BIN"
	GOBIN="$REF_BIN" go install "${missing[@]}"
fi
if [ ! -x "$REF_BIN/cnitool" ]; then
	echo "installing reference cnitool $CNITOOL_VERSION into $REF_BIN"
	GOBIN="$REF_BIN" go install "github.com/containernetworking/cni/cnitool@$CNITOOL_VERSION"
fi
bash "$(dirname "${BASH_SOURCE[0]}")/podman-deps.sh"
bash "$(dirname "${BASH_SOURCE[0]}")/firewalld-deps.sh"
