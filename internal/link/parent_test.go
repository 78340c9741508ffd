package link

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// Parent finds a macvlan's master across namespaces (made from the host,
// living in the container) and in the same namespace (linkInContainer),
// and refuses the wrong namespace either way.
func TestParent(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "lph")
	cont, contPath := testutil.NewNS(t, "lpc")
	mustIP(t, host, "link", "add", "m0", "type", "veth", "peer", "name", "m0p")
	mustIP(t, cont, "link", "add", "cm0", "type", "veth", "peer", "name", "cm0p")
	inHost(t, hostPath, contPath, func(h, c *NS) error {
		m0, err := h.LinkByName("m0")
		if err != nil {
			return err
		}
		l, err := h.AddLinkIn(c, &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{ParentIndex: m0.Attrs().Index, TxQLen: -1}, Mode: netlink.MACVLAN_MODE_BRIDGE}, "eth0")
		if err != nil {
			return err
		}
		if p, err := c.Parent(l, h); err != nil || p.Attrs().Name != "m0" {
			t.Errorf("Parent across namespaces = %v, %v; want m0", p, err)
		}
		if _, err := c.Parent(l, c); err == nil || !strings.Contains(err.Error(), "another namespace") {
			t.Errorf("Parent in the container for a host master: %v", err)
		}

		cm0, err := c.LinkByName("cm0")
		if err != nil {
			return err
		}
		l2, err := c.AddLinkIn(c, &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{ParentIndex: cm0.Attrs().Index, TxQLen: -1}, Mode: netlink.MACVLAN_MODE_BRIDGE}, "net1")
		if err != nil {
			return err
		}
		if p, err := c.Parent(l2, c); err != nil || p.Attrs().Name != "cm0" {
			t.Errorf("Parent in the same namespace = %v, %v; want cm0", p, err)
		}
		if _, err := c.Parent(l2, h); err == nil {
			t.Error("Parent in the host for a container master succeeded")
		}
		lo, err := c.LinkByName("lo")
		if err != nil {
			return err
		}
		if _, err := c.Parent(lo, c); err == nil || !strings.Contains(err.Error(), "no parent") {
			t.Errorf("Parent of lo: %v", err)
		}

		// NDiscNotify sets ndisc_notify beside arp_notify.
		res := &spec.Result{IPs: []*spec.IPConfig{{Interface: spec.IntPtr(0), Address: netip.MustParsePrefix("fd00:85::2/64")}}}
		return c.ConfigureIface(l, res, 0, IfaceOpts{ARPNotify: true, NDiscNotify: true})
	})
	for key, want := range map[string]string{"net/ipv6/conf/eth0/ndisc_notify": "1", "net/ipv4/conf/eth0/arp_notify": "1", "net/ipv4/conf/net1/arp_notify": "0"} {
		if out, err := testutil.InNS(t, cont, "cat", "/proc/sys/"+key); err != nil || out != want {
			t.Errorf("%s = %q (%v), want %s", key, out, err, want)
		}
	}
}
