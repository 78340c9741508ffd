#!/usr/bin/env bash
# make demo: the seed chain on embedded defaults (see cmd/patchbay-demo).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "make demo must run as root" >&2; exit 1; fi
# shellcheck source=apt.sh
. scripts/apt.sh
apt_ensure iproute2 nftables
go run ./cmd/patchbay-demo -bin bin
