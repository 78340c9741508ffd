# Sourced by the scripts/*-deps.sh (bash, as root): the one way they install
# Debian packages.
#
# apt_ensure PKG...
#   Installs the packages that are not installed yet. apt's lists are
#   refreshed at most once per script, and not at all when they are recent
#   and already name the packages. Every apt call waits for the dpkg lock
#   (unattended-upgrades holds it for minutes on a machine's first boot).
#
# apt_install_no_services EXE PREDICATE UNIT PKG...
#   apt_ensure without letting the packages leave a service running: tests
#   start their own servers (etcd, containerd) with their own state and never
#   share the packaged service. /usr/sbin/policy-rc.d forbids invoke-rc.d
#   starts during the install (removed afterwards, and only if we made it);
#   on a systemd machine the UNIT is disabled and stopped as well, so it does
#   not come back at the next boot. If a process running EXE appears anyway,
#   it is stopped when the function PREDICATE (called with the PID) says it is
#   the packaged service; any other new process running EXE (another test's
#   server, say) is left alone and reported.

export DEBIAN_FRONTEND=noninteractive
apt_updated=

apt_get() { apt-get -o DPkg::Lock::Timeout=600 "$@"; }

pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# apt_update_once refreshes the lists unless this script did already, or
# they are less than a day old and apt knows every package asked for.
apt_update_once() {
	[ -n "$apt_updated" ] && return 0
	apt_updated=1
	if [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
		local p known=1
		for p in "$@"; do
			apt-cache show "$p" >/dev/null 2>&1 || known=
		done
		[ -n "$known" ] && return 0
	fi
	apt_get update -qq
}

apt_ensure() {
	local need=() p
	for p in "$@"; do
		pkg_installed "$p" || need+=("$p")
	done
	[ ${#need[@]} -gt 0 ] || return 0
	echo "installing Debian packages: ${need[*]}"
	apt_update_once "${need[@]}"
	apt_get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

# PIDs of running processes whose executable is $1.
pids_of_exe() {
	local d
	for d in /proc/[0-9]*; do
		[ "$(readlink "$d/exe" 2>/dev/null)" = "$1" ] && echo "${d#/proc/}"
	done
	return 0
}

apt_install_no_services() {
	local exe="$1" is_service="$2" unit="$3"
	shift 3
	local need=() p
	for p in "$@"; do
		pkg_installed "$p" || need+=("$p")
	done
	[ ${#need[@]} -gt 0 ] || return 0
	local made_policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		made_policy=1
	fi
	local before rc=0 pid
	before="$(pids_of_exe "$exe" | tr '\n' ' ')"
	apt_ensure "${need[@]}" || rc=$?
	[ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
	[ "$rc" = 0 ] || { echo "apt-get install ${need[*]} failed ($rc)" >&2; return "$rc"; }
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
		systemctl disable --now "$unit" >/dev/null 2>&1 || true
	fi
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
