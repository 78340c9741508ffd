#!/usr/bin/env bash
# Puts a firewalld for the firewall plugin's tests (plugins/firewall) on a
# fresh Debian machine, as root, WITHOUT installing firewalld as a service:
# on a machine with systemd, `apt-get install firewalld` enables and starts
# it, and it would then firewall the machine itself. Instead Debian's
# firewalld and python3-firewall packages are downloaded and unpacked into
# FWD_DIR (a cache, reused), and only their libraries and the D-Bus daemon
# are installed as packages (none of them starts anything that touches the
# network). The tests run that firewalld inside a test network namespace on
# a private D-Bus daemon, and stop both by PID.
# Idempotent: does nothing when everything is there.
set -euo pipefail

FWD_DIR="${FWD_DIR:-$HOME/.cache/patchbay/firewalld}"

if [ "$(id -u)" != 0 ]; then
	echo "firewalld-deps.sh must run as root (it installs Debian packages)" >&2
	exit 1
fi

# shellcheck source=apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
apt_ensure dbus-daemon python3-dbus python3-gi gir1.2-glib-2.0 python3-nftables

if [ ! -x "$FWD_DIR/usr/sbin/firewalld" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	cd "$tmp"
	# apt-get download warns that it runs unsandboxed as root; harmless.
	if ! apt-get download firewalld python3-firewall 2>/dev/null; then
		apt_updated= apt_update_once firewalld python3-firewall
		apt-get download firewalld python3-firewall
	fi
	rm -rf "$FWD_DIR.tmp"
	mkdir -p "$FWD_DIR.tmp"
	for deb in ./*.deb; do
		dpkg-deb -x "$deb" "$FWD_DIR.tmp"
	done
	rm -rf "$FWD_DIR"
	mv "$FWD_DIR.tmp" "$FWD_DIR"
	echo "unpacked $(ls ./*.deb | xargs -n1 basename | tr '\n' ' ')into $FWD_DIR"
fi
echo "firewalld=$FWD_DIR/usr/sbin/firewalld dbus-daemon=$(command -v dbus-daemon)"
