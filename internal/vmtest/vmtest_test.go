package vmtest_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "runner" {
		runnerRole() // TestKillingTheRunnerKillsQEMU's child
	}
	vmtest.Main(m)
}

// open opens the namespace at path with its netlink handle until the test ends.
func open(t *testing.T, path string) *link.NS {
	t.Helper()
	ns, err := link.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return ns
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// addr adds a prefix (e.g. "192.0.2.1/24") to l and brings l up.
func addrUp(t *testing.T, ns *link.NS, l netlink.Link, prefix string) {
	t.Helper()
	a, err := netlink.ParseAddr(prefix)
	must(t, err)
	must(t, ns.H.AddrAdd(l, a))
	must(t, ns.H.LinkSetUp(l))
}

// byName reads a link back (with the attributes the kernel reports).
func byName(t *testing.T, ns *link.NS, name string) netlink.Link {
	t.Helper()
	l, err := ns.H.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

// ping sends one echo request from namespace nsName; the test ping waits
// generously: under TCG everything is slow.
func ping(t *testing.T, nsName, dst string) error {
	t.Helper()
	out, err := testutil.InNS(t, nsName, "ping", "-c", "1", "-W", "10", dst)
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v: %s", dst, nsName, err, out)
	}
	return nil
}

// moveTo moves l into the namespace target.
func moveTo(t *testing.T, from *link.NS, l netlink.Link, target *link.NS) {
	t.Helper()
	must(t, from.H.LinkSetNsFd(l, target.Fd()))
}

// slave makes an ipvlan or macvlan link, by the type of its mode.
func slave(mode any, attrs netlink.LinkAttrs) netlink.Link {
	if m, ok := mode.(netlink.IPVlanMode); ok {
		return &netlink.IPVlan{LinkAttrs: attrs, Mode: m}
	}
	return &netlink.Macvlan{LinkAttrs: attrs, Mode: mode.(netlink.MacvlanMode)}
}

// slaveMode is the mode an ipvlan or macvlan link reads back with.
func slaveMode(l netlink.Link) any {
	switch l := l.(type) {
	case *netlink.IPVlan:
		return l.Mode
	case *netlink.Macvlan:
		return l.Mode
	}
	return nil
}

// TestLinkTypes creates, inside the VM, each link type this machine's kernel
// lacks, in namespaces created inside the VM, and checks it works: read back
// from the kernel, and traffic where the type carries any.
func TestLinkTypes(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		testutil.RequireRoot(t)
		// Addresses are documentation ranges, only ever inside test netns.
		t.Run("dummy", func(t *testing.T) {
			_, p := testutil.NewNS(t, "dummy")
			ns := open(t, p)
			must(t, ns.H.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "d0"}}))
			l := byName(t, ns, "d0")
			if l.Type() != "dummy" {
				t.Fatalf("d0 is %q, want dummy", l.Type())
			}
			addrUp(t, ns, l, "192.0.2.1/24")
			routes, err := ns.H.RouteGet(net.ParseIP("192.0.2.99"))
			must(t, err)
			if len(routes) != 1 || routes[0].LinkIndex != l.Attrs().Index {
				t.Fatalf("route to 192.0.2.99 is %+v, want via d0", routes)
			}
		})
		t.Run("vlan", func(t *testing.T) {
			a, ap := testutil.NewNS(t, "vlana")
			_, bp := testutil.NewNS(t, "vlanb")
			an, bn := open(t, ap), open(t, bp)
			must(t, an.H.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "trunk"}, PeerName: "trunk",
				PeerNamespace: netlink.NsFd(bn.Fd())}))
			for i, ns := range []*link.NS{an, bn} {
				trunk := byName(t, ns, "trunk")
				must(t, ns.H.LinkSetUp(trunk))
				must(t, ns.H.LinkAdd(&netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: "v100", ParentIndex: trunk.Attrs().Index},
					VlanId: 100, VlanProtocol: netlink.VLAN_PROTOCOL_8021Q}))
				v := byName(t, ns, "v100")
				if vl, ok := v.(*netlink.Vlan); !ok || vl.VlanId != 100 || vl.VlanProtocol != netlink.VLAN_PROTOCOL_8021Q {
					t.Fatalf("v100 reads back as %#v", v)
				}
				addrUp(t, ns, v, fmt.Sprintf("192.0.2.%d/24", i+1))
			}
			must(t, ping(t, a, "192.0.2.2"))
		})
		// Two slaves of one parent, each in its own namespace, reach each
		// other. Each type has a dummy parent of its own: ipvlan and macvlan
		// cannot share one parent link.
		for i, c := range []struct {
			kind string
			mode any // the mode the slave is made with and reads back with
		}{{"ipvlan", netlink.IPVLAN_MODE_L2}, {"macvlan", netlink.MACVLAN_MODE_BRIDGE}} {
			t.Run(c.kind, func(t *testing.T) {
				_, hp := testutil.NewNS(t, c.kind+"h")
				a, ap := testutil.NewNS(t, c.kind+"a")
				_, bp := testutil.NewNS(t, c.kind+"b")
				h, an, bn := open(t, hp), open(t, ap), open(t, bp)
				must(t, h.H.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "parent"}}))
				parent := byName(t, h, "parent")
				must(t, h.H.LinkSetUp(parent))
				first := 11 + 10*i
				for j, ns := range []*link.NS{an, bn} {
					name := fmt.Sprintf("%s%d", c.kind, j)
					must(t, h.H.LinkAdd(slave(c.mode, netlink.LinkAttrs{Name: name, ParentIndex: parent.Attrs().Index})))
					moveTo(t, h, byName(t, h, name), ns)
					l := byName(t, ns, name)
					if got := slaveMode(l); got != c.mode {
						t.Fatalf("%s reads back as %#v (mode %v, want %v)", name, l, got, c.mode)
					}
					addrUp(t, ns, l, fmt.Sprintf("192.0.2.%d/24", first+j))
				}
				must(t, ping(t, a, fmt.Sprintf("192.0.2.%d", first+1)))
			})
		}
		t.Run("vrf", func(t *testing.T) {
			_, p := testutil.NewNS(t, "vrf")
			ns := open(t, p)
			must(t, ns.H.LinkAdd(&netlink.Vrf{LinkAttrs: netlink.LinkAttrs{Name: "blue"}, Table: 1010}))
			vrf := byName(t, ns, "blue")
			if v, ok := vrf.(*netlink.Vrf); !ok || v.Table != 1010 {
				t.Fatalf("blue reads back as %#v", vrf)
			}
			must(t, ns.H.LinkSetUp(vrf))
			must(t, ns.H.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "d0"}}))
			d := byName(t, ns, "d0")
			must(t, ns.H.LinkSetMaster(d, vrf))
			addrUp(t, ns, d, "198.51.100.1/24")
			// The connected route lands in the VRF's table, not in main.
			filter := &netlink.Route{Table: 1010, Dst: &net.IPNet{IP: net.ParseIP("198.51.100.0").To4(), Mask: net.CIDRMask(24, 32)}}
			inVRF, err := ns.H.RouteListFiltered(netlink.FAMILY_V4, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
			must(t, err)
			filter.Table = 254
			inMain, err := ns.H.RouteListFiltered(netlink.FAMILY_V4, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
			must(t, err)
			if len(inVRF) != 1 || len(inMain) != 0 {
				t.Fatalf("198.51.100.0/24: %d routes in the VRF table, %d in main; want 1 and 0", len(inVRF), len(inMain))
			}
		})
		t.Run("bond", func(t *testing.T) {
			_, p := testutil.NewNS(t, "bond")
			ns := open(t, p)
			b := netlink.NewLinkBond(netlink.LinkAttrs{Name: "bond0"})
			b.Mode = netlink.BOND_MODE_ACTIVE_BACKUP
			b.Miimon = 100
			must(t, ns.H.LinkAdd(b))
			bond := byName(t, ns, "bond0")
			if bl, ok := bond.(*netlink.Bond); !ok || bl.Mode != netlink.BOND_MODE_ACTIVE_BACKUP {
				t.Fatalf("bond0 reads back as %#v", bond)
			}
			for _, n := range []string{"s0", "s1"} {
				must(t, ns.H.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: n}}))
				must(t, ns.H.LinkSetMaster(byName(t, ns, n), bond)) // a slave must be down: new dummies are
			}
			addrUp(t, ns, bond, "203.0.113.1/24")
			active := 0
			for _, n := range []string{"s0", "s1"} {
				l := byName(t, ns, n)
				if l.Attrs().MasterIndex != bond.Attrs().Index {
					t.Fatalf("%s has master %d, want bond0 (%d)", n, l.Attrs().MasterIndex, bond.Attrs().Index)
				}
				if s, ok := l.Attrs().Slave.(*netlink.BondSlave); ok && s.State == netlink.BondStateActive {
					active++
				}
			}
			if active != 1 {
				t.Fatalf("%d active slaves in active-backup mode, want 1", active)
			}
		})
		t.Run("bridge-vlan-filtering", func(t *testing.T) {
			// Ports of ten and ten2 are in VLAN 10, twenty's in VLAN 20:
			// ten reaches ten2 and not twenty.
			_, hp := testutil.NewNS(t, "brh")
			h := open(t, hp)
			on := true
			must(t, h.H.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}, VlanFiltering: &on}))
			br := byName(t, h, "br0")
			if b, ok := br.(*netlink.Bridge); !ok || b.VlanFiltering == nil || !*b.VlanFiltering {
				t.Fatalf("br0 reads back as %#v", br)
			}
			must(t, h.H.LinkSetUp(br))
			names := map[string]string{}
			for i, c := range []struct {
				name string
				vid  uint16
			}{{"ten", 10}, {"ten2", 10}, {"twenty", 20}} {
				nsName, p := testutil.NewNS(t, c.name)
				names[c.name] = nsName
				cn := open(t, p)
				port := "p-" + c.name
				must(t, h.H.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: port, MasterIndex: br.Attrs().Index},
					PeerName: "eth0", PeerNamespace: netlink.NsFd(cn.Fd())}))
				pl := byName(t, h, port)
				must(t, h.H.BridgeVlanAdd(pl, c.vid, true, true, false, true))
				must(t, h.H.LinkSetUp(pl))
				addrUp(t, cn, byName(t, cn, "eth0"), fmt.Sprintf("192.0.2.%d/24", 31+i))
			}
			vlans, err := h.H.BridgeVlanList()
			must(t, err)
			for _, port := range []string{"p-ten", "p-twenty"} {
				idx := byName(t, h, port).Attrs().Index
				want := map[string]uint16{"p-ten": 10, "p-twenty": 20}[port]
				found := false
				for _, v := range vlans[int32(idx)] {
					if v.Vid == want && v.PortVID() && v.EngressUntag() {
						found = true
					}
				}
				if !found {
					t.Fatalf("%s has VLANs %v, want pvid untagged %d", port, vlans[int32(idx)], want)
				}
			}
			must(t, ping(t, names["ten"], "192.0.2.32"))
			if out, err := testutil.InNS(t, names["ten"], "ping", "-c", "1", "-W", "2", "192.0.2.33"); err == nil {
				t.Fatalf("VLAN 10 reached VLAN 20 through a VLAN-filtering bridge: %s", out)
			}
		})
	})
}

// TestGuestEnvironment checks what tests inside rely on: Debian's kernel,
// our bin/ and the reference binaries at the host's paths and runnable,
// writable /run/netns and /tmp.
func TestGuestEnvironment(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		if !vmtest.InVM() {
			t.Fatal("InVM is false inside the VM")
		}
		k, err := vmtest.FindKernel()
		must(t, err)
		out, err := exec.Command("uname", "-r").Output()
		must(t, err)
		if got := strings.TrimSpace(string(out)); got != k.Release {
			t.Fatalf("running kernel %q, want Debian's %q", got, k.Release)
		}
		out, err = exec.Command(filepath.Join(testutil.OurBin(t), "patchbay"), "version").CombinedOutput()
		if err != nil {
			t.Fatalf("our bin/patchbay in the VM: %v: %s", err, out)
		}
		ref := exec.Command(filepath.Join(testutil.RefBin(t), "bridge"))
		ref.Env = append(os.Environ(), "CNI_COMMAND=VERSION")
		out, err = ref.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "supportedVersions") {
			t.Fatalf("reference bridge VERSION in the VM: %v: %s", err, out)
		}
		if _, err := os.Stat(filepath.Join(testutil.RefBin(t), "cnitool")); err != nil {
			t.Fatalf("reference cnitool: %v", err)
		}
		testutil.NewNS(t, "env") // /run/netns is writable
		must(t, os.WriteFile(filepath.Join(t.TempDir(), "f"), []byte("x"), 0o644))
	})
}
