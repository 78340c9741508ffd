#!/usr/bin/env bash
# Installs what the real-node tests (internal/nodetest and its users) need
# beyond scripts/kube-deps.sh, on a fresh Debian machine, as root:
#   - containerd (Debian's 1.6, with ctr) and runc — never left running as a
#     service: every test node starts its own containerd with its own state;
#   - busybox-static (the test images' busybox) and util-linux's nsenter.
# The kube binaries and etcd come from scripts/kube-deps.sh. Idempotent.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [ "$(id -u)" != 0 ]; then
	echo "node-deps.sh must run as root (it installs Debian packages)" >&2
	exit 1
fi

# shellcheck source=apt.sh
. "$here/apt.sh"

# The packaged service runs containerd without arguments (its unit's
# ExecStart); a test node's containerd always has --config.
containerd_is_service() {
	[ "$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)" = "/usr/bin/containerd " ]
}

apt_install_no_services /usr/bin/containerd containerd_is_service containerd.service containerd runc busybox-static util-linux
echo "containerd=$(command -v containerd) ($(containerd --version | awk '{print $3}')) ctr=$(command -v ctr) runc=$(command -v runc) busybox=$(command -v busybox)"
