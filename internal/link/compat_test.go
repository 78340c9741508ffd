package link

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// The veth pair looks like the reference's: the container side keeps the
// kernel's default queue length (1000), the host side has none (0, as the
// reference's peer gets), and the host side ignores router advertisements
// (accept_ra 0: the plugin owns the routes through it).
func TestVethLikeReference(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "lvh")
	cont, contPath := testutil.NewNS(t, "lvc")
	var hostName string
	inHost(t, hostPath, contPath, func(h, c *NS) error {
		hl, _, err := h.AddVeth(c, VethOpts{ContName: "eth0"})
		if err != nil {
			return err
		}
		hostName = hl.Attrs().Name
		return nil
	})
	qlen := func(ns, dev string) string {
		out, err := testutil.InNS(t, ns, "cat", "/sys/class/net/"+dev+"/tx_queue_len")
		if err != nil {
			t.Fatalf("tx_queue_len of %s: %v: %s", dev, err, out)
		}
		return out
	}
	if q := qlen(cont, "eth0"); q != "1000" {
		t.Errorf("container eth0 tx_queue_len = %s, want 1000 (kernel default, as the reference)", q)
	}
	if q := qlen(host, hostName); q != "0" {
		t.Errorf("host %s tx_queue_len = %s, want 0 (as the reference)", hostName, q)
	}
	if out, _ := testutil.InNS(t, host, "cat", "/proc/sys/net/ipv6/conf/"+hostName+"/accept_ra"); out != "0" {
		t.Errorf("host %s accept_ra = %s, want 0", hostName, out)
	}
}

// IPv6 addresses survive the container interface going down and up
// (keep_addr_on_down, as the reference sets it); without it the kernel
// drops them on link down and nothing puts them back.
func TestConfigureIfaceKeepsIPv6OverLinkFlap(t *testing.T) {
	_, hostPath := testutil.NewNS(t, "lkh")
	cont, contPath := testutil.NewNS(t, "lkc")
	inHost(t, hostPath, contPath, func(h, c *NS) error {
		_, cl, err := h.AddVeth(c, VethOpts{ContName: "eth0"})
		if err != nil {
			return err
		}
		res := &spec.Result{IPs: []*spec.IPConfig{{Interface: spec.IntPtr(0), Address: netip.MustParsePrefix("fd00:73::2/64")}}}
		return c.ConfigureIface(cl, res, 0, IfaceOpts{})
	})
	for _, st := range []string{"down", "up"} {
		if out, err := testutil.InNS(t, cont, "ip", "link", "set", "eth0", st); err != nil {
			t.Fatalf("set eth0 %s: %v: %s", st, err, out)
		}
	}
	if out, _ := testutil.InNS(t, cont, "ip", "-6", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(out, "fd00:73::2/64") {
		t.Errorf("IPv6 address lost after link down/up: %s", out)
	}
}
