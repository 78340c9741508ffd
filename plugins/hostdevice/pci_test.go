package hostdevice

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

// The VM gets two virtio network cards wired to each other: real PCI
// network devices for pciBusID, kernelpath, deviceID and DPDK mode.
func TestMain(m *testing.M) {
	os.Exit(vmtest.WrapWith(vmtest.Options{NICs: 2}, func() int { return testutil.Run(m) }))
}

// pciOf returns the PCI address and the sysfs device directory of the
// guest's network card ethN (before anything moves it).
func pciOf(t *testing.T, ifname string) (addr, dir string) {
	t.Helper()
	dev, err := filepath.EvalSymlinks("/sys/class/net/" + ifname + "/device") // .../0000:00:03.0/virtio1
	if err != nil {
		t.Fatalf("%s has no device: %v", ifname, err)
	}
	dir = filepath.Dir(dev)
	return filepath.Base(dir), dir
}

func sh(t *testing.T, script string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", script, err, out)
	}
	return string(out)
}

// In the VM: eth0 (card 0) is the device, moved into a test host namespace
// first (so that sysfs, mounted in the initial namespace, does not list it:
// the lookups must not depend on that); eth1 (card 1), at the other end of
// the wire, sits in a peer namespace. Each way of naming the card moves
// it into the container, where traffic crosses the wire; DEL brings it back
// as eth0 with its MAC and MTU. Then: the container's namespace destroyed
// (the kernel returns the card to the initial namespace under its
// container name: DEL finds and restores it), and DPDK mode (the card bound
// to uio_pci_generic: no interface, addresses reported only).
func TestPCIDevices(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		pci, pciDir := pciOf(t, "eth0")
		if !strings.HasPrefix(pciDir, "/sys/devices/") {
			t.Fatalf("PCI device directory %s", pciDir)
		}
		peer, _ := testutil.NewNS(t, "hdp")
		sh(t, "ip link set eth1 netns "+peer+" && ip -n "+peer+" addr add 10.65.0.1/24 dev eth1 && ip -n "+peer+" link set eth1 up")
		l := &lab{t: t, dataDir: t.TempDir(), ipamDir: t.TempDir(), cniPath: testutil.RefBin(t), origMAC: vmtest.NICMAC(0)}
		l.host, l.hostPath = testutil.NewNS(t, "hdh")
		sh(t, "ip link set eth0 netns "+l.host+" && ip -n "+l.host+" link set eth0 mtu 1400 up")
		t.Cleanup(func() { exec.Command("ip", "-n", l.host, "link", "set", "eth0", "netns", "1").Run() })
		back := func() {
			t.Helper()
			d := l.link(l.host, "eth0")
			if d.Name == "" || d.Address != vmtest.NICMAC(0) || d.MTU != 1400 || !d.up() {
				t.Errorf("eth0 not back as it was: %+v", d)
			}
		}
		for _, c := range []struct {
			name  string
			extra map[string]any
		}{
			{"pciBusID", map[string]any{"pciBusID": pci}},
			{"kernelpath", map[string]any{"kernelpath": pciDir}},
			{"deviceID", map[string]any{"runtimeConfig": map[string]any{"deviceID": pci}}},
			{"hwaddr", map[string]any{"hwaddr": vmtest.NICMAC(0)}},
		} {
			t.Run(c.name, func(t *testing.T) {
				l.t = t
				cont, contPath := testutil.NewNS(t, "hdc")
				c.extra["device"] = nil
				conf := l.conf("1.1.0", c.extra, "10.65.0.0/24")
				r, out := l.mustAdd(conf, "p1", contPath, "net1")
				if r.Interfaces[0].Mac != vmtest.NICMAC(0) {
					t.Errorf("result: %s", out)
				}
				if c.name != "hwaddr" && !strings.Contains(out, `"pciID": "`+pci+`"`) && !strings.Contains(out, `"pciID":"`+pci+`"`) {
					t.Errorf("1.1.0 result without pciID %s: %s", pci, out)
				}
				if o, err := testutil.InNS(t, cont, "ping", "-c", "1", "-W", "5", "10.65.0.1"); err != nil {
					t.Errorf("ping across the wire from the moved card: %v: %s", err, o)
				}
				l.mustRun("CHECK", withPrev(t, conf, out), "p1", contPath, "net1")
				l.mustRun("DEL", conf, "p1", contPath, "net1")
				back()
			})
		}
		l.t = t

		t.Run("netns-destroyed", func(t *testing.T) {
			// The plugin runs in the initial namespace here: that is where
			// the kernel returns a physical device.
			sh(t, "ip -n "+l.host+" link set eth0 netns 1 && ip link set eth0 up")
			defer sh(t, "ip link set eth0 netns "+l.host+" && ip -n "+l.host+" link set eth0 up")
			root := &lab{t: t, host: "", hostPath: "/proc/1/ns/net", dataDir: l.dataDir, ipamDir: l.ipamDir, cniPath: l.cniPath}
			gone, gonePath := testutil.NewNS(t, "hdg")
			conf := root.conf("1.1.0", map[string]any{"device": "eth0"}, "10.65.0.0/24")
			root.mustAdd(conf, "g1", gonePath, "net1")
			sh(t, "ip -n "+gone+" link set net1 mtu 9000")
			sh(t, "ip netns del "+gone)
			var where string
			for i := 0; i < 50 && !strings.Contains(where, "net1"); i++ { // the kernel moves it back asynchronously
				time.Sleep(100 * time.Millisecond)
				where = sh(t, "ip -o link")
			}
			if !strings.Contains(where, "net1") {
				t.Fatalf("the card did not come back to the initial namespace as net1:\n%s", where)
			}
			root.mustRun("DEL", conf, "g1", gonePath, "net1")
			got := sh(t, "ip -o link show eth0")
			if !strings.Contains(got, "mtu 1400") || !strings.Contains(got, ",UP") || !strings.Contains(got, vmtest.NICMAC(0)) {
				t.Errorf("after DEL: %s", got)
			}
			if strings.Contains(sh(t, "ip -o link"), "net1") {
				t.Errorf("net1 still there")
			}
		})

		t.Run("dpdk", func(t *testing.T) {
			// Bind the card to a userspace driver: it has no interface then.
			sh(t, "ip -n "+l.host+" link set eth0 netns 1")
			sh(t, "/run/guest/modprobe uio_pci_generic")
			sh(t, "echo uio_pci_generic >"+pciDir+"/driver_override && echo "+pci+" >"+pciDir+"/driver/unbind && echo "+pci+" >/sys/bus/pci/drivers_probe")
			if drv, _ := filepath.EvalSymlinks(pciDir + "/driver"); filepath.Base(drv) != "uio_pci_generic" {
				t.Fatalf("card bound to %q", drv)
			}
			_, contPath := testutil.NewNS(t, "hdc")
			conf := l.conf("1.1.0", map[string]any{"device": nil, "pciBusID": pci}, "10.65.0.0/24")
			r, out := l.mustAdd(conf, "d1", contPath, "net1")
			if len(r.Interfaces) != 1 || r.Interfaces[0].Mac != "" || r.Interfaces[0].PciID != pci || len(r.IPs) != 1 {
				t.Errorf("DPDK result: %s", out)
			}
			l.mustRun("CHECK", withPrev(t, conf, out), "d1", contPath, "net1")
			l.mustRun("DEL", conf, "d1", contPath, "net1")
			if m, _ := filepath.Glob(filepath.Join(l.ipamDir, "hdnet", "10.*")); len(m) != 0 {
				t.Errorf("IPAM not released: %v", m)
			}
		})
	})
}
