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

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

need_pkgs=()
for p in podman runc conmon busybox-static; do
	installed "$p" || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
	echo "installing Debian packages: ${need_pkgs[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi
echo "podman=$(command -v podman) runc=$(command -v runc) busybox=$(command -v busybox)"
