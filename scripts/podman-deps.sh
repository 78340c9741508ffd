#!/usr/bin/env bash
# Installs what the podman interop test (interop/podman_test.go) needs on a
# fresh Debian machine, as root: podman (4.3, CNI backend), runc (crun fails
# on hybrid cgroups here), conmon, and busybox-static (a static busybox runs
# in a bare --rootfs; a dynamic one would not). Rootful only, so uidmap and
# slirp4netns are not needed. Idempotent: installs nothing when all are there.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "podman-deps.sh must run as root (it installs Debian packages)" >&2
	exit 1
fi

# shellcheck source=apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
apt_ensure podman runc conmon busybox-static
echo "podman=$(command -v podman) runc=$(command -v runc) busybox=$(command -v busybox)"
