# Sourced by scripts/kube-deps.sh and scripts/node-deps.sh (bash, as root).
#
# apt_install_no_services EXE PREDICATE PKG...
#   Installs the Debian packages PKG... without letting their maintainer
#   scripts leave a service running: tests start their own servers (etcd,
#   containerd) with their own state and never share the packaged service.
#   /usr/sbin/policy-rc.d forbids invoke-rc.d starts during the install (it
#   is removed afterwards, and only if we made it). If a process running EXE
#   appears anyway, it is stopped when the function PREDICATE (called with the
#   PID) says it is the packaged service; any other new process running EXE
#   (another test's server, say) is left alone and reported.

# PIDs of running processes whose executable is $1.
pids_of_exe() {
	local d
	for d in /proc/[0-9]*; do
		[ "$(readlink "$d/exe" 2>/dev/null)" = "$1" ] && echo "${d#/proc/}"
	done
	return 0
}

apt_install_no_services() {
	local exe="$1" is_service="$2"
	shift 2
	export DEBIAN_FRONTEND=noninteractive
	local made_policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		made_policy=1
	fi
	local before rc=0 pid
	before="$(pids_of_exe "$exe" | tr '\n' ' ')"
	{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; } || rc=$?
	[ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
	[ "$rc" = 0 ] || { echo "apt-get install $* failed ($rc)" >&2; return "$rc"; }
	for pid in $(pids_of_exe "$exe"); do
		case " $before " in *" $pid "*) continue ;; esac
		if "$is_service" "$pid"; then
			echo "stopping $exe (pid $pid) started by the package's install scripts"
			kill "$pid" || true
		else
			echo "note: a $exe (pid $pid) appeared during the install; not the packaged service, left alone" >&2
		fi
	done
}
