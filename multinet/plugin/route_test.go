package plugin

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// default-route in a real pod namespace: the cluster network's default
// routes (both families) go, one default route per listed gateway comes
// on the selected attachment's interface, the first with the lowest
// metric. The namespace is reached through its own route-netlink handle
// (link.NS): the code used to open a handle with address families where
// netlink protocols belong (a USERSOCK and a FIB_LOOKUP socket), so every
// request opened a fresh socket instead.
func TestApplyDefaultRouteInPodNamespace(t *testing.T) {
	ns, path := testutil.NewNS(t, "mnrt")
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	for _, l := range [][3]string{{"eth0", "10.61.0.2/24", "fd00:61::2/64"}, {"net1", "10.62.0.2/24", "fd00:62::2/64"}} {
		ip("link", "add", l[0], "type", "veth", "peer", "name", "p"+l[0])
		ip("addr", "add", l[1], "dev", l[0])
		ip("addr", "add", l[2], "dev", l[0], "nodad")
		ip("link", "set", l[0], "up")
		ip("link", "set", "p"+l[0], "up")
	}
	ip("route", "add", "default", "via", "10.61.0.1", "dev", "eth0")
	ip("-6", "route", "add", "default", "via", "fd00:61::1", "dev", "eth0")

	inv := &invocation{args: &skel.CmdArgs{Netns: path}}
	plan := &Plan{Attachments: []*Attachment{
		{Name: "default/cluster", IfName: "eth0"},
		{Name: "default/net1", IfName: "net1", HasDefault: true, DefaultRoute: []string{"10.62.0.1", "fd00:62::1"}},
	}}
	if err := inv.applyDefaultRoute(plan, nil); err != nil {
		t.Fatal(err)
	}
	for fam, want := range map[string]string{"-4": "default via 10.62.0.1 dev net1", "-6": "default via fd00:62::1 dev net1 metric 1"} {
		out, err := testutil.InNS(t, ns, "ip", fam, "route", "show", "default")
		if err != nil {
			t.Fatalf("ip %s route: %v: %s", fam, err, out)
		}
		if !strings.HasPrefix(out, want) || strings.Count(out, "default") != 1 {
			t.Errorf("ip %s route show default = %q, want only %q", fam, out, want)
		}
	}

	// An interface that is not there: code 999 naming the attachment.
	plan.Attachments[1].IfName = "net9"
	err := inv.applyDefaultRoute(plan, nil)
	if e := spec.AsError(err, 0); e == nil || e.Code != spec.ErrInternal || !strings.Contains(e.Msg, `"default/net1" (interface net9)`) {
		t.Errorf("missing interface: %v", err)
	}
}
