package link

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// links lists the interface names in a test namespace.
func links(t *testing.T, ns string) []string {
	t.Helper()
	out, err := testutil.InNS(t, ns, "ls", "/sys/class/net")
	if err != nil {
		t.Fatalf("list links in %s: %v: %s", ns, err, out)
	}
	return strings.Fields(out)
}

func mustIP(t *testing.T, ns string, args ...string) {
	t.Helper()
	if out, err := testutil.InNS(t, ns, append([]string{"ip"}, args...)...); err != nil {
		t.Fatalf("ip %v in %s: %v: %s", args, ns, err, out)
	}
}

func hasLink(t *testing.T, ns, name string) bool {
	t.Helper()
	for _, l := range links(t, ns) {
		if l == name {
			return true
		}
	}
	return false
}

func noTempLinks(t *testing.T, nss ...string) {
	t.Helper()
	for _, ns := range nss {
		for _, l := range links(t, ns) {
			if strings.HasPrefix(l, "pbtmp") {
				t.Errorf("temporary link %s left in %s", l, ns)
			}
		}
	}
}

// macvlan (this kernel has it) made from the host, on a host master,
// straight into the container, while the host has a link of the final
// name: the temporary name keeps them apart. A name taken in the
// container fails by name and leaves nothing. With linkInContainer the
// master and the link are in the container. tun/tap devices land in the
// container too.
func TestAddLinkIn(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "lmh")
	cont, contPath := testutil.NewNS(t, "lmc")
	mustIP(t, host, "link", "add", "master0", "type", "veth", "peer", "name", "eth0")
	mustIP(t, cont, "link", "add", "cmaster0", "type", "veth", "peer", "name", "cpeer0")
	inHost(t, hostPath, contPath, func(h, c *NS) error {
		master, err := h.LinkByName("master0")
		if err != nil {
			return err
		}
		mv := func(parent int) *netlink.Macvlan {
			at := netlink.NewLinkAttrs()
			at.ParentIndex, at.MTU = parent, 1400
			return &netlink.Macvlan{LinkAttrs: at, Mode: netlink.MACVLAN_MODE_BRIDGE}
		}
		l, err := h.AddLinkIn(c, mv(master.Attrs().Index), "eth0")
		if err != nil {
			t.Fatalf("AddLinkIn: %v", err)
		}
		if l.Attrs().Name != "eth0" || l.Type() != "macvlan" || l.Attrs().MTU != 1400 {
			t.Errorf("new link %s type %s mtu %d", l.Attrs().Name, l.Type(), l.Attrs().MTU)
		}
		if got, err := c.LinkByName("eth0"); err != nil || got.Attrs().Index != l.Attrs().Index {
			t.Errorf("container eth0: %v", err)
		}
		if hl, err := h.LinkByName("eth0"); err != nil || hl.Type() != "veth" {
			t.Errorf("host eth0 changed: %v", err)
		}

		_, err = h.AddLinkIn(c, mv(master.Attrs().Index), "eth0")
		if err == nil || !strings.Contains(err.Error(), `"eth0" already exists in `+contPath) {
			t.Errorf("second eth0: %v", err)
		}

		cm, err := c.LinkByName("cmaster0")
		if err != nil {
			return err
		}
		in, err := c.AddLinkIn(c, mv(cm.Attrs().Index), "net1")
		if err != nil || in.Attrs().Name != "net1" || in.Attrs().ParentIndex != cm.Attrs().Index {
			t.Errorf("linkInContainer: %v", err)
		}
		if _, err := c.AddLinkIn(c, mv(cm.Attrs().Index), "net1"); err == nil || !strings.Contains(err.Error(), `"net1" already exists`) {
			t.Errorf("linkInContainer, name taken: %v", err)
		}

		// A tap device, asked of the host's handle, is born in the
		// container: /dev/net/tun is opened from a thread inside it.
		tap := func() *netlink.Tuntap {
			return &netlink.Tuntap{LinkAttrs: netlink.NewLinkAttrs(), Mode: netlink.TUNTAP_MODE_TAP}
		}
		if tl, err := h.AddLinkIn(c, tap(), "tap0"); err != nil || tl.Attrs().Name != "tap0" || tl.Type() != "tuntap" {
			t.Errorf("tap: %v", err)
		}
		if _, err := h.AddLinkIn(c, tap(), "eth0"); err == nil || !strings.Contains(err.Error(), `"eth0" already exists in `+contPath) {
			t.Errorf("tap, name taken: %v", err)
		}
		return nil
	})
	noTempLinks(t, host, cont)
	if hasLink(t, host, "tap0") {
		t.Error("tap0 was made in the host namespace")
	}
	if got := strings.Join(links(t, cont), " "); got != "cmaster0 cpeer0 eth0 lo net1 tap0" {
		t.Errorf("container links = %s", got)
	}
}

// An ADD killed between AddLinkIn's creation and its rename leaves the
// link in the container under the temporary name fixed for (container,
// name) (issue 7, found by internal/crashtest): DelAddLeftover deletes it,
// and the next AddLinkIn of that name, finding it, takes its place.
func TestAddLinkInLeftover(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "llh")
	cont, contPath := testutil.NewNS(t, "llc")
	mustIP(t, host, "link", "add", "master0", "type", "veth", "peer", "name", "master0p")
	inHost(t, hostPath, contPath, func(h, c *NS) error {
		tmp, err := c.addTempName("eth0")
		if err != nil {
			return err
		}
		if other, _ := h.addTempName("eth0"); other == tmp || !strings.HasPrefix(tmp, "pbtmp") || len(tmp) != 13 {
			t.Errorf("temporary names: %q in the container, %q in the host", tmp, other)
		}
		leftover := func() {
			t.Helper()
			mustIP(t, host, "link", "add", tmp, "link", "master0", "netns", contPath, "type", "macvlan", "mode", "bridge")
		}
		leftover()
		if err := c.DelAddLeftover("net1"); err != nil || !hasLink(t, cont, tmp) {
			t.Errorf("DelAddLeftover of another name: %v, or it deleted %s", err, tmp)
		}
		if err := c.DelAddLeftover("eth0"); err != nil || hasLink(t, cont, tmp) {
			t.Errorf("DelAddLeftover: %v, or %s is still there", err, tmp)
		}
		if err := c.DelAddLeftover("eth0"); err != nil {
			t.Errorf("DelAddLeftover with nothing left: %v", err)
		}
		leftover()
		master, err := h.LinkByName("master0")
		if err != nil {
			return err
		}
		at := netlink.NewLinkAttrs()
		at.ParentIndex = master.Attrs().Index
		if _, err := h.AddLinkIn(c, &netlink.Macvlan{LinkAttrs: at, Mode: netlink.MACVLAN_MODE_BRIDGE}, "eth0"); err != nil {
			t.Errorf("AddLinkIn over a leftover: %v", err)
		}
		return nil
	})
	noTempLinks(t, host, cont)
	if got := strings.Join(links(t, cont), " "); got != "eth0 lo" {
		t.Errorf("container links = %s", got)
	}
}

// A host link moves into the container under a temporary name when its
// own name is taken there, and is renamed; it moves back under its old
// name (host-device's DEL); a move to a name taken in the container fails
// by name and leaves the link where it was, under its old name.
func TestMoveLink(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "lvh")
	cont, contPath := testutil.NewNS(t, "lvc")
	mustIP(t, host, "link", "add", "dev0", "type", "veth", "peer", "name", "dev0p")
	mustIP(t, host, "link", "set", "dev0", "up")
	mustIP(t, cont, "link", "add", "dev0", "type", "veth", "peer", "name", "eth0")
	inHost(t, hostPath, contPath, func(h, c *NS) error {
		l, err := h.LinkByName("dev0")
		if err != nil {
			return err
		}
		mac := l.Attrs().HardwareAddr.String()
		in, err := h.MoveLink(l, c, "net1")
		if err != nil {
			t.Fatalf("MoveLink in: %v", err)
		}
		if in.Attrs().Name != "net1" || in.Attrs().HardwareAddr.String() != mac {
			t.Errorf("moved link %s mac %s, want net1 %s", in.Attrs().Name, in.Attrs().HardwareAddr, mac)
		}
		if got, err := c.LinkByName("net1"); err != nil || got.Attrs().HardwareAddr.String() != mac {
			t.Errorf("net1 in the container: %v", err)
		}

		back, err := c.MoveLink(in, h, "dev0")
		if err != nil || back.Attrs().Name != "dev0" {
			t.Fatalf("MoveLink back: %v", err)
		}
		if got, err := h.LinkByName("dev0"); err != nil || got.Attrs().HardwareAddr.String() != mac {
			t.Errorf("dev0 back in the host: %v", err)
		}

		_, err = h.MoveLink(back, c, "eth0")
		if err == nil || !strings.Contains(err.Error(), `"eth0" already exists in `+contPath) {
			t.Errorf("move to a taken name: %v", err)
		}
		if got, err := h.LinkByName("dev0"); err != nil || got.Attrs().HardwareAddr.String() != mac || back.Attrs().Name != "dev0" {
			t.Errorf("dev0 not put back after the failed move (link says %q): %v", back.Attrs().Name, err)
		}

		// Within one namespace: a rename.
		if r, err := h.MoveLink(back, h, "dev9"); err != nil || r.Attrs().Name != "dev9" {
			t.Errorf("rename in place: %v", err)
		}
		return nil
	})
	noTempLinks(t, host, cont)
	if !hasLink(t, host, "dev9") || hasLink(t, cont, "net1") || !hasLink(t, cont, "dev0") {
		t.Errorf("links after: host %v, container %v", links(t, host), links(t, cont))
	}
}
