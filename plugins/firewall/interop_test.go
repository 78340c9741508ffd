package firewall

import (
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// The reference firewall plugin v1.9.1 and ours on one node, in the
// reference's iptables layout (its default backend: no firewalld here).
// Our bridge and host-local serve both, so only the firewall differs.

// TestSwitchFromReference: a node that ran the reference switches to ours:
// our CHECK passes on the reference's rules, and our DEL removes them,
// bridge isolation included, leaving the rule set as it was before the
// reference's ADD (the reference would leave its chains).
func TestSwitchFromReference(t *testing.T) {
	ours := testutil.OurBin(t)
	n := newNode(t, refFirewallDir(t))
	before := n.state()
	l := n.list(bridgeFirewall("1.0.0", "fwsw", "fwbrsw", "10.37.0.0/24", "fd37::/64", `,"ingressPolicy":"same-bridge"`))
	res := n.mustAdd(l, "r1", nil)
	if !n.iptablesHas(false, "-s "+addrOf(t, res, false)+"/32", "-j ACCEPT") || !n.iptablesHas(true, "-s "+addrOf(t, res, true)+"/128") {
		t.Fatalf("the reference's rules are not there:\n%s", n.state())
	}
	n.cni.Path = []string{ours}
	if err := n.check(l, "r1"); err != nil {
		t.Errorf("our CHECK of the reference's rules: %v", err)
	}
	n.mustDel(l, "r1")
	if after := n.state(); after != before {
		t.Fatalf("our DEL of the reference's attachment left:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestSwitchToReference: the other way round (a rollback): the reference's
// CHECK passes on our rules and its DEL removes our per-address rules; it
// leaves its scaffolding (it never removes chains) and our record, which
// our GC then clears, leaving the rule set as before.
func TestSwitchToReference(t *testing.T) {
	ours := testutil.OurBin(t)
	n := newNode(t)
	before := n.state()
	l := n.list(bridgeFirewall("1.1.0", "fwsw", "fwbrsw", "10.37.0.0/24", "fd37::/64", `,"ingressPolicy":"isolated"`))
	res := n.mustAdd(l, "o1", nil)
	ip4, ip6 := addrOf(t, res, false), addrOf(t, res, true)
	n.cni.Path = []string{refFirewallDir(t)}
	if err := n.check(l, "o1"); err != nil {
		t.Errorf("the reference's CHECK of our rules: %v", err)
	}
	n.mustDel(l, "o1")
	wantRules(t, n, backendIPT, ip4, ip6, false)
	n.cni.Path = []string{ours}
	if err := n.gc(l); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if after := n.state(); after != before {
		t.Fatalf("left after the reference's DEL and our GC:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestCoexistWithReference: two networks on one node, one through the
// reference's firewall, one through ours, both same-bridge. They share the
// scaffolding and the isolation chains: each CHECK passes, traffic between
// the two bridges is dropped, and our DEL leaves the reference's rules
// (its CHECK still passes, its container still isolated).
func TestCoexistWithReference(t *testing.T) {
	ours, ref := testutil.OurBin(t), refFirewallDir(t)
	n := newNode(t)
	lr := n.list(bridgeFirewall("1.0.0", "fwref", "fwbrref", "10.38.1.0/24", "", `,"ingressPolicy":"same-bridge"`))
	lo := n.list(bridgeFirewall("1.0.0", "fwours", "fwbrours", "10.38.2.0/24", "", `,"ingressPolicy":"same-bridge"`))
	n.cni.Path = []string{ref}
	r1 := n.mustAdd(lr, "r1", nil)
	n.cni.Path = []string{ours}
	o1 := n.mustAdd(lo, "o1", nil)
	if err := n.check(lo, "o1"); err != nil {
		t.Errorf("our CHECK: %v", err)
	}
	n.cni.Path = []string{ref}
	if err := n.check(lr, "r1"); err != nil {
		t.Errorf("the reference's CHECK with ours beside it: %v", err)
	}
	if n.ping("r1", addrOf(t, o1, false)) || n.ping("o1", addrOf(t, r1, false)) {
		t.Error("traffic crosses between the two same-bridge bridges")
	}
	if !n.ping("r1", "10.38.1.1") || !n.ping("o1", "10.38.2.1") {
		t.Error("a container does not reach its gateway")
	}
	n.cni.Path = []string{ours}
	n.mustDel(lo, "o1")
	n.cni.Path = []string{ref}
	if err := n.check(lr, "r1"); err != nil {
		t.Errorf("the reference's CHECK after our DEL: %v\n%s", err, n.state())
	}
	if !n.iptablesHas(false, "-i fwbrref ! -o fwbrref") || n.iptablesHas(false, "fwbrours") {
		t.Errorf("want the reference's bridge isolated and ours gone:\n%s", n.state())
	}
	n.mustDel(lr, "r1")
	if st := n.state(); strings.Contains(st, addrOf(t, r1, false)) {
		t.Errorf("the reference's DEL left its address rules:\n%s", st)
	}
}
