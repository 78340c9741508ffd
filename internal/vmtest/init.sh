#!/bin/busybox sh
# Stage 1 of the test VM (internal/vmtest): the /init of its initramfs,
# built by scripts/vm-deps.sh. It makes the host's root, shared read-only over
# 9p (tag "root"), the VM's root with a tmpfs overlay on top, mounts the
# per-VM read-write share (tag "vmtest") at /run/vmtest, and hands over to
# /run/vmtest/stage2, which the host wrote (vmtest's Go code owns everything
# after this point). Any failure powers the VM off: the host then reports the
# console log. Kept small on purpose: this file only changes with the contract
# above (vmtest checks the initramfs was built from this very file).
B=/bin/busybox
fail() {
	echo "vmtest init: $*" >/dev/console
	$B poweroff -f
}
$B mount -t proc proc /proc || fail "mount /proc"
$B mount -t devtmpfs dev /dev || fail "mount /dev"
$B modprobe -a virtio_pci virtio_console 9pnet_virtio 9p overlay || fail "modprobe"
# msize: larger 9p messages cut round trips for the test binaries and tools read
# from the host; cache=loose: the root is read-only and does not change under a
# test run.
$B mkdir -p /mnt/lower /mnt/rw /newroot
$B mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose root /mnt/lower || fail "mount 9p root"
$B mount -t tmpfs -o mode=755 rw /mnt/rw || fail "mount tmpfs"
$B mkdir -p /mnt/rw/upper /mnt/rw/work
$B mount -t overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work overlay /newroot || fail "mount overlay"
# The host's /run (its netns mounts, sockets, pid files) stays hidden.
$B mount -t tmpfs -o mode=755 run /newroot/run || fail "mount /run"
$B mkdir -p /newroot/run/vmtest
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none vmtest /newroot/run/vmtest || fail "mount 9p vmtest"
# Stage 2 uses this busybox: the host's own may be missing or dynamic.
$B cp $B /newroot/run/busybox
$B mount --move /dev /newroot/dev || fail "move /dev"
$B mount --move /proc /newroot/proc || fail "move /proc"
exec $B switch_root /newroot /run/busybox sh /run/vmtest/stage2
fail "switch_root"
