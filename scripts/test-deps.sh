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

# shellcheck source=apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
# dnsmasq-base: the dhcp plugin's test server (no service: -base has none).
apt_ensure iproute2 nftables iptables iputils-ping strace dnsmasq-base

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
# cnitool at the libcni versions containerd and CRI-O releases vendor, each
# in <cache>/cnitool-<version>: multinet's shipped conflist is run through
# every one (multinet/shipped_e2e_test.go, which lists the same versions).
# v1.1.2: containerd 1.6/1.7, CRI-O 1.25-1.30; v1.2.3: containerd 2.0,
# CRI-O 1.31-1.32; v1.3.0: containerd 2.1+, CRI-O 1.33+. A few seconds each.
for v in ${RUNTIME_CNITOOL_VERSIONS:-v1.1.2 v1.2.3 v1.3.0}; do
	d="$(dirname "$REF_BIN")/cnitool-$v"
	if [ ! -x "$d/cnitool" ]; then
		echo "installing cnitool $v (the libcni of container runtimes) into $d"
		GOBIN="$d" go install "github.com/containernetworking/cni/cnitool@$v"
	fi
done
bash "$(dirname "${BASH_SOURCE[0]}")/podman-deps.sh"
bash "$(dirname "${BASH_SOURCE[0]}")/firewalld-deps.sh"
