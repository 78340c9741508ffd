#!/usr/bin/env bash
# Installs what the VM tests (internal/vmtest) need on a fresh Debian machine,
# as root, and caches it; idempotent (a second run only checks):
#   - Debian packages: qemu-system-x86, busybox-static, xz-utils;
#   - Debian's own kernel, linux-image-amd64's current flavour (never -cloud:
#     it lacks 9p), fetched with `apt-get download` and unpacked with
#     `dpkg-deb -x` (not installed), its modules indexed with busybox depmod,
#     the uncompressed vmlinux taken out of the bzImage (QEMU boots it
#     directly through its PVH entry: no decompression under TCG);
#   - a small initramfs: static busybox, the modules for virtio + 9p +
#     overlay, and internal/vmtest/init.sh as /init.
# Everything lands in $VM_CACHE/kernel-<release>_<package version>/ and
# $VM_CACHE/current points at it (vmtest reads PATCHBAY_VM_DIR, which the
# Makefile sets to that link). Older kernel directories are removed once a
# newer one is complete. apt is only asked again after its lists changed.
# Prints the time of each step.
set -euo pipefail
trap 'echo "vm-deps: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
init_sh="$here/../internal/vmtest/init.sh"
VM_CACHE="${VM_CACHE:-$HOME/.cache/patchbay/vm}"
# The kernel package; default: what linux-image-amd64 depends on today.
VM_KERNEL_PKG="${VM_KERNEL_PKG:-}"

if [ "$(id -u)" != 0 ]; then
	echo "vm-deps.sh must run as root (it installs Debian packages)" >&2
	exit 1
fi

mkdir -p "$VM_CACHE"
# One run at a time (two `make test-deps` at once would race on the rename).
exec 9>"$VM_CACHE/.lock"
flock 9

now() { date +%s.%N; }
t_all=$(now)
t_step=$t_all
step() { # step NAME: prints how long the step that just ended took
	local t
	t=$(now)
	printf 'vm-deps: %-22s %6.1f s\n' "$1" "$(awk "BEGIN { print $t - $t_step }")"
	t_step=$t
}

# shellcheck source=apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

# 1. Debian packages. busybox-static: the initramfs needs a static busybox
# (its depmod also replaces kmod's, which is often absent).
if ! pkg_installed qemu-system-x86 || ! pkg_installed busybox-static || ! pkg_installed xz-utils; then
	apt_ensure qemu-system-x86 busybox-static xz-utils
	step "apt-get install"
fi
bb=/bin/busybox

# 2. The kernel package and its cache directory.
resolve_kernel() {
	if [ -n "$VM_KERNEL_PKG" ]; then
		pkg=$VM_KERNEL_PKG
	else
		pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
	fi
	[ -n "$pkg" ] || return 1
	ver=$(apt-cache policy "$pkg" 2>/dev/null | awk '$1 == "Candidate:" { print $2 }')
	[ -n "$ver" ] && [ "$ver" != "(none)" ]
}
# Fast path: the cached kernel is current unless apt's lists changed since
# it was made (apt-cache alone takes seconds on a busy machine).
if [ -z "$VM_KERNEL_PKG" ] && [ -e "$VM_CACHE/current/ready" ] && [ -e "$VM_CACHE/current/checked" ] &&
	[ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -newer "$VM_CACHE/current/checked" 2>/dev/null | head -1)" ]; then
	kdir="$(readlink -f "$VM_CACHE/current")"
	release="$(cat "$kdir/release")"
	ver="${kdir##*_}"
elif ! resolve_kernel; then
	apt_get update -qq
	resolve_kernel || { echo "vm-deps: cannot find the kernel package (linux-image-amd64's dependency) in apt" >&2; exit 1; }
fi
[ -n "${kdir:-}" ] || { kdir="$VM_CACHE/kernel-${pkg#linux-image-}_$ver"; step "ask apt for the kernel"; }
release=${release:-${pkg#linux-image-}}
case "$release" in
*-cloud-*) echo "vm-deps: $pkg is a -cloud kernel (no 9p); set VM_KERNEL_PKG to a linux-image-*-amd64" >&2; exit 1 ;;
esac

if [ ! -e "$kdir/ready" ]; then
	echo "vm-deps: fetching $pkg $ver into $kdir"
	tmp="$VM_CACHE/.tmp-$$"
	rm -rf "$tmp"
	mkdir -p "$tmp/dl"
	trap 'rm -rf "$tmp"' EXIT
	# apt-get download writes into the current directory; as root it warns
	# that _apt cannot write there, which is harmless.
	if ! (cd "$tmp/dl" && apt-get download "$pkg=$ver" 2>/dev/null); then
		# Stale lists: the archive has moved on to a newer kernel.
		apt_get update -qq
		resolve_kernel || exit 1
		release=${pkg#linux-image-}
		kdir="$VM_CACHE/kernel-${release}_$ver"
		(cd "$tmp/dl" && apt-get download "$pkg=$ver")
	fi
	step "download kernel .deb"
	# Only what a network test VM can use: no sound, GPU, media, storage or
	# wireless drivers (half the size, and depmod runs faster).
	dpkg-deb --fsys-tarfile "$tmp"/dl/*.deb | tar -x -C "$tmp" \
		--exclude='./usr' --exclude='./lib/firmware' \
		--exclude="./lib/modules/$release/kernel/sound" \
		$(for d in gpu media scsi usb infiniband iio staging hid hwmon md platform input mtd comedi video target mmc isdn bluetooth net/wireless net/usb net/can ata nvme; do
			printf -- "--exclude=./lib/modules/$release/kernel/drivers/%s " "$d"
		done)
	rm -rf "$tmp/dl"
	step "unpack kernel"
	# The uncompressed kernel: the bzImage's payload is an xz stream (Debian
	# builds with CONFIG_KERNEL_XZ); the first offset of xz's magic that
	# decompresses to an ELF file is it.
	vmlinuz="$tmp/boot/vmlinuz-$release"
	for off in $(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | cut -d: -f1); do
		# (tail gets SIGPIPE when xz stops at the stream's end.)
		{ tail -c +$((off + 1)) "$vmlinuz" || true; } | xz -dc --single-stream >"$tmp/vmlinux" 2>/dev/null || true
		[ "$(head -c 4 "$tmp/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] && break
		rm -f "$tmp/vmlinux"
	done
	[ -s "$tmp/vmlinux" ] || { echo "vm-deps: no xz-compressed ELF kernel in $vmlinuz" >&2; exit 1; }
	rm -f "$vmlinuz"
	step "extract vmlinux"
	$bb depmod -b "$tmp" "$release"
	step "depmod"
	echo "$release" >"$tmp/release"
	touch "$tmp/ready"
	rm -rf "$kdir"
	mv "$tmp" "$kdir"
	trap - EXIT
fi

# 3. The initramfs, rebuilt whenever init.sh or busybox changes.
stamp="$(cat "$init_sh" $bb | sha256sum | cut -c1-16)"
if [ "$(cat "$kdir/initramfs.stamp" 2>/dev/null)" != "$stamp" ]; then
	ird="$kdir/.initramfs-$$"
	rm -rf "$ird"
	mkdir -p "$ird"/{bin,proc,dev,sys,mnt,newroot}
	cp "$bb" "$ird/bin/busybox"
	cp "$init_sh" "$ird/init"
	chmod 755 "$ird/init"
	# The boot modules and everything they depend on (modules.dep lists the
	# full dependency closure of each module).
	mods="$kdir/lib/modules/$release"
	for m in virtio_pci virtio_console 9pnet_virtio 9p overlay; do
		grep -E "(^|/)$m\.ko:" "$mods/modules.dep" | tr -d ':' | tr ' ' '\n'
	done | sort -u | while read -r f; do
		[ -n "$f" ] || continue
		mkdir -p "$ird/lib/modules/$release/$(dirname "$f")"
		cp "$mods/$f" "$ird/lib/modules/$release/$f"
	done
	cp "$mods/modules.dep" "$ird/lib/modules/$release/"
	(cd "$ird" && find . -mindepth 1 | $bb cpio -o -H newc 2>/dev/null) >"$kdir/initramfs.cpio.tmp"
	rm -rf "$ird"
	mv "$kdir/initramfs.cpio.tmp" "$kdir/initramfs.cpio"
	# vmtest compares this copy with the init.sh it was built with.
	cp "$init_sh" "$kdir/init.sh"
	echo "$stamp" >"$kdir/initramfs.stamp"
	step "initramfs"
fi

touch "$kdir/checked"
ln -sfn "$(basename "$kdir")" "$VM_CACHE/current.tmp"
mv -T "$VM_CACHE/current.tmp" "$VM_CACHE/current"
for old in "$VM_CACHE"/kernel-*; do
	[ "$old" = "$kdir" ] || { echo "vm-deps: removing older kernel $old"; rm -rf "$old"; }
done

printf 'vm-deps: total %.1f s; kernel %s (%s) in %s\n' "$(awk "BEGIN { print $(now) - $t_all }")" "$release" "$ver" "$kdir"
