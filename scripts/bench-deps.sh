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
