#!/usr/bin/env bash
# Installs what the Kubernetes API tests (internal/kubetest and its users)
# need, on a fresh Debian machine, as root:
#   - etcd from Debian's etcd-server package (never left running as a service);
#   - kube-apiserver, built from the Go module proxy through the wrapper
#     module in test/kube/apiserver, into a cache directory.
# Idempotent: when both are present it only prints where they are.
# Prints "etcd=<path>" and "kube-apiserver=<path>" as its last lines.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wrapper="$here/../test/kube/apiserver"
# The version is the one the wrapper module requires.
KUBE_VERSION="$(awk '$1 == "k8s.io/kubernetes" { print $2 }' "$wrapper/go.mod")"
[ -n "$KUBE_VERSION" ] || { echo "no k8s.io/kubernetes requirement in $wrapper/go.mod" >&2; exit 1; }
KUBE_CACHE="${KUBE_CACHE:-$HOME/.cache/patchbay/kube-$KUBE_VERSION}"

if [ "$(id -u)" != 0 ]; then
	echo "kube-deps.sh must run as root (it installs Debian packages)" >&2
	exit 1
fi

# PIDs of running processes whose executable is the packaged etcd.
etcd_pids() {
	local d
	for d in /proc/[0-9]*; do
		[ "$(readlink "$d/exe" 2>/dev/null)" = /usr/bin/etcd ] && echo "${d#/proc/}"
	done
	return 0
}

if ! command -v etcd >/dev/null; then
	echo "installing Debian package etcd-server"
	export DEBIAN_FRONTEND=noninteractive
	# Forbid maintainer scripts from starting the etcd service: tests start
	# their own etcd on free ports. policy-rc.d is only ours if we made it.
	made_policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		made_policy=1
	fi
	before="$(etcd_pids | tr "\n" " ")"
	rc=0
	{ apt-get update -qq && apt-get install -y -qq --no-install-recommends etcd-server >/dev/null; } || rc=$?
	[ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
	[ "$rc" = 0 ] || { echo "apt-get install etcd-server failed ($rc)" >&2; exit "$rc"; }
	# If the service got started anyway, stop exactly that one: an etcd that
	# did not exist before the install, runs the packaged binary and runs as
	# the package's etcd user (as its init script starts it).
	for pid in $(etcd_pids); do
		case " $before " in *" $pid "*) continue ;; esac
		if [ "$(stat -c %U "/proc/$pid" 2>/dev/null)" = etcd ]; then
			echo "stopping etcd (pid $pid) started by the package's install scripts"
			kill "$pid" || true
		elif [ -n "$pid" ]; then
			echo "note: an etcd (pid $pid) appeared during the install; not ours to stop, left alone" >&2
		fi
	done
fi

bin="$KUBE_CACHE/kube-apiserver"
if [ ! -x "$bin" ]; then
	echo "building kube-apiserver $KUBE_VERSION into $KUBE_CACHE (several minutes, ~2.5 GB of Go build cache)"
	mkdir -p "$KUBE_CACHE"
	start=$(date +%s)
	# Build to a temporary name so an interrupted build never looks cached.
	# Stamp the version as kubernetes' own build does (else "v0.0.0-master").
	v="${KUBE_VERSION#v}" ldflags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=${v%%.*} -X $pkg.gitMinor=$(echo "$v" | cut -d. -f2) -X $pkg.gitTreeState=clean"
	done
	(cd "$wrapper" && go build -trimpath -ldflags="$ldflags" -o "$bin.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
	mv "$bin.tmp" "$bin"
	echo "built kube-apiserver in $(($(date +%s) - start)) s"
fi

echo "etcd=$(command -v etcd)"
echo "kube-apiserver=$bin"
