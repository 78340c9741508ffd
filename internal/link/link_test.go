package link

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// Everything runs inside a test host netns; the veth peer is created
// straight in the container netns.
func TestVethAddrRouteCheckDel(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "lkh")
	_, contPath := testutil.NewNS(t, "lkc")
	inHost(t, hostPath, contPath, func(h, c *NS) error {
		hl, cl, err := h.AddVeth(c, VethOpts{ContName: "eth0", MTU: 1450, ContMAC: "02:00:00:00:00:aa"})
		if err != nil {
			t.Fatalf("AddVeth: %v", err)
		}
		if !strings.HasPrefix(hl.Attrs().Name, "veth") || cl.Attrs().HardwareAddr.String() != "02:00:00:00:00:aa" || cl.Attrs().MTU != 1450 {
			t.Errorf("veth attrs: host %s, container mac %s mtu %d", hl.Attrs().Name, cl.Attrs().HardwareAddr, cl.Attrs().MTU)
		}
		if p, err := PeerIndex(cl); err != nil || p != hl.Attrs().Index {
			t.Errorf("PeerIndex = %d, %v; want %d", p, err, hl.Attrs().Index)
		}
		// A second pair with the same container name is refused by name.
		if _, _, err := h.AddVeth(c, VethOpts{ContName: "eth0"}); err == nil || !strings.Contains(err.Error(), `"eth0" already exists`) {
			t.Errorf("duplicate container name: %v", err)
		}

		res := &spec.Result{
			IPs: []*spec.IPConfig{
				{Interface: spec.IntPtr(0), Address: netip.MustParsePrefix("10.70.0.2/24"), Gateway: netip.MustParseAddr("10.70.0.1")},
				{Interface: spec.IntPtr(0), Address: netip.MustParsePrefix("fd00:70::2/64")},
			},
			Routes: []*spec.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0")}, {Dst: netip.MustParsePrefix("192.168.70.0/24"), GW: netip.MustParseAddr("10.70.0.9")}},
		}
		if err := c.ConfigureIface(cl, res, 0, IfaceOpts{}); err != nil {
			t.Fatalf("ConfigureIface: %v", err)
		}
		if err := c.CheckAddrs(cl, res.IPs, 0); err != nil {
			t.Errorf("CheckAddrs: %v", err)
		}
		if err := c.CheckRoutes(res.Routes); err != nil {
			t.Errorf("CheckRoutes: %v", err)
		}
		if err := c.CheckRoutes([]*spec.Route{{Dst: netip.MustParsePrefix("10.99.0.0/16")}}); err == nil {
			t.Error("CheckRoutes accepted a missing route")
		}
		// A route that names its table is looked for there (and only there).
		inTable := []*spec.Route{{Dst: netip.MustParsePrefix("192.168.71.0/24"), GW: netip.MustParseAddr("10.70.0.9"), Table: spec.IntPtr(100)},
			{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.70.0.1"), Table: spec.IntPtr(100)}}
		for _, r := range inTable {
			if err := c.AddRoute(cl, r, r.GW); err != nil {
				t.Fatalf("AddRoute in table 100: %v", err)
			}
		}
		if err := c.CheckRoutes(inTable); err != nil {
			t.Errorf("CheckRoutes in table 100: %v", err)
		}
		if err := c.CheckRoutes([]*spec.Route{{Dst: netip.MustParsePrefix("192.168.71.0/24")}}); err == nil {
			t.Error("CheckRoutes found a table-100 route in the main table")
		}
		if err := c.CheckRoutes([]*spec.Route{{Dst: netip.MustParsePrefix("192.168.70.0/24"), Table: spec.IntPtr(100)}}); err == nil {
			t.Error("CheckRoutes found a main-table route in table 100")
		}

		addrs, found, err := c.DelLinkWithAddrs("eth0")
		if err != nil || !found || len(addrs) != 2 {
			t.Errorf("DelLinkWithAddrs = %v, %v, %v", addrs, found, err)
		}
		if _, found, err := c.DelLinkWithAddrs("eth0"); err != nil || found {
			t.Errorf("second DelLinkWithAddrs = %v, %v", found, err)
		}
		return nil
	})
	// An error would leave out empty and the check vacuous.
	if out, err := testutil.InNS(t, host, "ip", "-o", "link"); err != nil || strings.Contains(out, "veth") {
		t.Errorf("host veth left (or links unreadable: %v): %s", err, out)
	}
}

func TestEnsureAddrRules(t *testing.T) {
	_, hostPath := testutil.NewNS(t, "lka")
	inHost(t, hostPath, "", func(h, _ *NS) error {
		br, created, err := h.EnsureBridge(BridgeOpts{Name: "pbbrx"})
		if err != nil {
			return err
		}
		if !created {
			t.Error("EnsureBridge of a new bridge did not say it created it")
		}
		if again, created, err := h.EnsureBridge(BridgeOpts{Name: "pbbrx"}); err != nil || created || again.Index != br.Index || again.HardwareAddr.String() != br.HardwareAddr.String() {
			t.Errorf("EnsureBridge twice: created=%v err=%v", created, err)
		}
		p := netip.MustParsePrefix
		if err := h.EnsureAddr(br, p("10.71.0.1/24"), false); err != nil {
			t.Fatal(err)
		}
		if err := h.EnsureAddr(br, p("10.71.0.1/24"), false); err != nil {
			t.Errorf("same address again: %v", err)
		}
		if err := h.EnsureAddr(br, p("10.72.0.1/24"), false); err == nil {
			t.Error("a second IPv4 address was accepted without forceAddress")
		}
		// IPv6: non-overlapping subnets may coexist, overlapping ones not.
		if err := h.EnsureAddr(br, p("fd00:71::1/64"), false); err != nil {
			t.Error(err)
		}
		if err := h.EnsureAddr(br, p("fd00:72::1/64"), false); err != nil {
			t.Errorf("disjoint v6 subnet: %v", err)
		}
		if err := h.EnsureAddr(br, p("fd00:71::5/64"), false); err == nil {
			t.Error("overlapping v6 address accepted without forceAddress")
		}
		return nil
	})
}

// inHost runs f inside the netns at hostPath with a handle on it and, when
// contPath is set, one on the container netns; an error fails the test.
func inHost(t *testing.T, hostPath, contPath string, f func(h, c *NS) error) {
	t.Helper()
	err := netns.Do(hostPath, func() error {
		h, err := Current()
		if err != nil {
			return err
		}
		defer h.Close()
		var c *NS
		if contPath != "" {
			if c, err = Open(contPath); err != nil {
				return err
			}
			defer c.Close()
		}
		return f(h, c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGatewayFor(t *testing.T) {
	for in, want := range map[string]string{"10.1.2.3/16": "10.1.0.1", "fd00::9/64": "fd00::1"} {
		if got := GatewayFor(netip.MustParsePrefix(in)); got.String() != want {
			t.Errorf("GatewayFor(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestVlanRuns(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want [][2]int
	}{
		{nil, nil},
		{[]int{5}, [][2]int{{5, 5}}},
		{[]int{1, 2, 3, 7, 9, 10}, [][2]int{{1, 3}, {7, 7}, {9, 10}}},
	} {
		got := vlanRuns(c.in)
		if len(got) != len(c.want) {
			t.Errorf("vlanRuns(%v) = %v, want %v", c.in, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("vlanRuns(%v) = %v, want %v", c.in, got, c.want)
			}
		}
	}
}
