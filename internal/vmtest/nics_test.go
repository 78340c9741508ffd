package vmtest

import (
	"strings"
	"testing"
)

// TestNICs boots a VM with two network cards (Options.NICs): the guest has
// them as virtio PCI devices eth0 and eth1 with the documented MACs, and
// they are wired to each other (one in each of two namespaces ping).
func TestNICs(t *testing.T) {
	if InVM() {
		t.Fatal("run it on the host")
	}
	m, err := Start(Options{NICs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	script := `set -e
for i in 0 1; do
	cat /sys/class/net/eth$i/address
	basename "$(readlink /sys/class/net/eth$i/device/driver)"
	basename "$(readlink /sys/class/net/eth$i/device/subsystem)"
done
ip netns add a; ip netns add b
ip link set eth0 netns a; ip link set eth1 netns b
ip -n a addr add 10.99.0.1/24 dev eth0; ip -n a link set eth0 up
ip -n b addr add 10.99.0.2/24 dev eth1; ip -n b link set eth1 up
ip netns exec a ping -c 1 -W 10 10.99.0.2 >/dev/null && echo wired`
	code, out, errOut := vmExec(t, m, Command{Args: []string{"sh", "-c", script}})
	want := strings.Join([]string{NICMAC(0), "virtio_net", "virtio", NICMAC(1), "virtio_net", "virtio", "wired"}, "\n") + "\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s", code, out, want, errOut)
	}
}
