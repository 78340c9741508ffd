package link

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// CheckLink names what differs: missing, type, MAC, MTU, down.
func TestCheckLink(t *testing.T) {
	_, hostPath := testutil.NewNS(t, "lch")
	_, contPath := testutil.NewNS(t, "lcc")
	inHost(t, hostPath, contPath, func(h, c *NS) error {
		_, cl, err := h.AddVeth(c, VethOpts{ContName: "eth0", MTU: 1450, ContMAC: "02:00:00:00:00:bb"})
		if err != nil {
			return err
		}
		want := LinkWant{Type: "veth", MAC: "02:00:00:00:00:bb", MTU: 1450}
		if l, err := c.CheckLink("eth0", want); err != nil || l.Attrs().Index != cl.Attrs().Index {
			t.Errorf("CheckLink of a matching link: %v", err)
		}
		for _, tc := range []struct {
			name string
			w    LinkWant
			msg  string
		}{
			{"eth9", LinkWant{}, `interface "eth9" not found in ` + contPath},
			{"eth0", LinkWant{Type: "macvlan"}, `interface "eth0" is a veth, not a macvlan`},
			{"eth0", LinkWant{MAC: "02:00:00:00:00:cc"}, `interface "eth0" MAC is 02:00:00:00:00:bb, prevResult says 02:00:00:00:00:cc`},
			{"eth0", LinkWant{MTU: 1500}, `interface "eth0" MTU is 1450, expected 1500`},
			{"eth0", LinkWant{Up: true}, `interface "eth0" is down`},
		} {
			if _, err := c.CheckLink(tc.name, tc.w); err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("CheckLink(%s, %+v) = %v, want %q", tc.name, tc.w, err, tc.msg)
			}
		}
		if err := c.H.LinkSetUp(cl); err != nil {
			return err
		}
		if _, err := c.CheckLink("eth0", LinkWant{Up: true}); err != nil {
			t.Errorf("up link: %v", err)
		}
		return nil
	})
}

func TestFindIface(t *testing.T) {
	res := &spec.Result{Interfaces: []*spec.Interface{
		{Name: "cni0"}, {Name: "eth0", Sandbox: "/run/netns/a"}, {Name: "eth0"}, {Name: "eth0", Sandbox: "/run/netns/a"},
	}}
	for _, tc := range []struct {
		name, sandbox string
		want          int
	}{{"cni0", "", 0}, {"eth0", "", 2}, {"eth0", "/run/netns/a", 3}, {"eth0", "/run/netns/b", -1}, {"cni0", "/run/netns/a", -1}} {
		if got := FindIface(res, tc.name, tc.sandbox); got != tc.want {
			t.Errorf("FindIface(%s, %q) = %d, want %d", tc.name, tc.sandbox, got, tc.want)
		}
	}
}

// The default route's link: none is an error; IPv6 only counts when there
// is no IPv4 default; the lowest metric wins; a multipath route counts
// through its first next hop.
func TestDefaultRouteLink(t *testing.T) {
	ns, path := testutil.NewNS(t, "ldr")
	for _, l := range []string{"up0", "up1", "up2"} {
		mustIP(t, ns, "link", "add", l, "type", "veth", "peer", "name", "p"+l)
		mustIP(t, ns, "link", "set", l, "up")
	}
	mustIP(t, ns, "addr", "add", "10.81.0.2/24", "dev", "up1")
	mustIP(t, ns, "addr", "add", "10.82.0.2/24", "dev", "up2")
	mustIP(t, ns, "addr", "add", "fd00:81::2/64", "dev", "up0", "nodad")
	h, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	name := func() string {
		t.Helper()
		l, err := h.DefaultRouteLink()
		if err != nil {
			return "error: " + err.Error()
		}
		return l.Attrs().Name
	}
	if got := name(); got != "error: no default route in "+path {
		t.Errorf("no default route: %s", got)
	}
	mustIP(t, ns, "-6", "route", "add", "default", "via", "fd00:81::1", "dev", "up0")
	if got := name(); got != "up0" {
		t.Errorf("IPv6 default only: %s, want up0", got)
	}
	mustIP(t, ns, "route", "add", "default", "via", "10.82.0.1", "dev", "up2", "metric", "200")
	mustIP(t, ns, "route", "add", "default", "via", "10.81.0.1", "dev", "up1", "metric", "100")
	if got := name(); got != "up1" {
		t.Errorf("two IPv4 defaults: %s, want up1 (lowest metric)", got)
	}
	mustIP(t, ns, "route", "del", "default", "via", "10.81.0.1")
	mustIP(t, ns, "route", "del", "default", "via", "10.82.0.1")
	mustIP(t, ns, "route", "add", "default", "nexthop", "via", "10.82.0.1", "dev", "up2", "nexthop", "via", "10.81.0.1", "dev", "up1")
	if got := name(); got != "up2" {
		t.Errorf("multipath default: %s, want up2 (first next hop)", got)
	}
}

// The DEL side: an empty or vanished namespace path opens as nil; a
// missing link is found=false; OpenContainer gives a vanished one code 3.
func TestDelHelpers(t *testing.T) {
	ns, path := testutil.NewNS(t, "ldl")
	mustIP(t, ns, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
	notNS := t.TempDir() + "/netns"
	if err := os.WriteFile(notNS, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "/run/netns/pbt-does-not-exist", notNS} {
		if n, err := OpenIfExists(p); n != nil || err != nil {
			t.Errorf("OpenIfExists(%q) = %v, %v; want nil, nil", p, n, err)
		}
		if as, err := DelContainerLink(p, "eth0"); as != nil || err != nil {
			t.Errorf("DelContainerLink(%q) = %v, %v", p, as, err)
		}
	}
	_, err := OpenContainer("/run/netns/pbt-does-not-exist")
	if e := spec.AsError(err, 0); e == nil || e.Code != spec.ErrUnknownContainer || !strings.Contains(e.Msg, "pbt-does-not-exist") {
		t.Errorf("OpenContainer of a vanished namespace: %v", err)
	}
	n, err := OpenIfExists(path)
	if err != nil || n == nil {
		t.Fatalf("OpenIfExists(%s) = %v, %v", path, n, err)
	}
	defer n.Close()
	if found, err := n.DelLink("eth0"); !found || err != nil {
		t.Errorf("DelLink(eth0) = %v, %v", found, err)
	}
	if found, err := n.DelLink("eth0"); found || err != nil {
		t.Errorf("second DelLink(eth0) = %v, %v", found, err)
	}
	if hasLink(t, ns, "peer0") {
		t.Error("peer0 outlived its veth")
	}
}

// ConfigureIface's sysctls: without DAD the container side gets
// accept_dad 0 (with DADSysctls), arp_notify with ARPNotify, and
// keep_addr_on_down for IPv6; with DAD accept_dad and enhanced_dad are 1
// and the address is settled (not tentative) on return. An interface with
// IPv6 disabled gets it enabled to take its IPv6 address.
func TestConfigureIfaceSysctls(t *testing.T) {
	_, hostPath := testutil.NewNS(t, "lsh")
	cont, contPath := testutil.NewNS(t, "lsc")
	sysctl := func(key string) string {
		t.Helper()
		out, err := testutil.InNS(t, cont, "cat", "/proc/sys/"+key)
		if err != nil {
			t.Fatalf("read %s: %v: %s", key, err, out)
		}
		return out
	}
	res := func(v6 string) *spec.Result {
		return &spec.Result{IPs: []*spec.IPConfig{
			{Interface: spec.IntPtr(0), Address: netip.MustParsePrefix("10.83.0.2/24")},
			{Interface: spec.IntPtr(0), Address: netip.MustParsePrefix(v6)},
		}}
	}
	var peerOfNet1 netlink.Link
	inHost(t, hostPath, contPath, func(h, c *NS) error {
		_, eth0, err := h.AddVeth(c, VethOpts{ContName: "eth0"})
		if err != nil {
			return err
		}
		if err := c.ConfigureIface(eth0, res("fd00:83::2/64"), 0, IfaceOpts{DADSysctls: true, ARPNotify: true}); err != nil {
			t.Fatalf("ConfigureIface without DAD: %v", err)
		}
		if peerOfNet1, _, err = h.AddVeth(c, VethOpts{ContName: "net1"}); err != nil {
			return err
		}
		// DAD needs the other end up to finish.
		return h.H.LinkSetUp(peerOfNet1)
	})
	for key, want := range map[string]string{
		"net/ipv6/conf/eth0/accept_dad": "0", "net/ipv4/conf/eth0/arp_notify": "1", "net/ipv6/conf/eth0/keep_addr_on_down": "1",
	} {
		if got := sysctl(key); got != want {
			t.Errorf("%s = %s, want %s", key, got, want)
		}
	}
	mustIP(t, cont, "link", "set", "net1", "up")
	if out, err := testutil.InNS(t, cont, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/net1/disable_ipv6"); err != nil {
		t.Fatalf("disable IPv6 on net1: %v: %s", err, out)
	}
	mustIP(t, cont, "link", "set", "net1", "down")
	inHost(t, hostPath, contPath, func(h, c *NS) error {
		net1, err := c.LinkByName("net1")
		if err != nil {
			return err
		}
		if err := c.ConfigureIface(net1, res("fd00:84::2/64"), 0, IfaceOpts{DAD: true, DADSysctls: true}); err != nil {
			t.Fatalf("ConfigureIface with DAD: %v", err)
		}
		return nil
	})
	for key, want := range map[string]string{
		"net/ipv6/conf/net1/accept_dad": "1", "net/ipv6/conf/net1/enhanced_dad": "1", "net/ipv6/conf/net1/disable_ipv6": "0",
	} {
		if got := sysctl(key); got != want {
			t.Errorf("%s = %s, want %s", key, got, want)
		}
	}
	out, err := testutil.InNS(t, cont, "ip", "-6", "-o", "addr", "show", "dev", "net1", "scope", "global")
	if err != nil || !strings.Contains(out, "fd00:84::2/64") || strings.Contains(out, "tentative") {
		t.Errorf("net1's IPv6 address after ConfigureIface with DAD: %v: %s", err, out)
	}
}
