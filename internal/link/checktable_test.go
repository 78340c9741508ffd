package link

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// Routes are checked in the table they name (1.1.0's "table"); a result
// too old to name tables also finds a route in a table that a rule sends
// the interface's own address to (where sbr moves it), and nowhere else.
func TestCheckRoutesByTable(t *testing.T) {
	ns, path := testutil.NewNS(t, "lct")
	mustIP(t, ns, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
	mustIP(t, ns, "addr", "add", "10.91.0.2/24", "dev", "eth0")
	mustIP(t, ns, "link", "set", "eth0", "up")
	mustIP(t, ns, "link", "set", "peer0", "up")
	mustIP(t, ns, "route", "add", "default", "via", "10.91.0.1", "table", "100")
	mustIP(t, ns, "route", "add", "192.168.0.0/16", "via", "10.91.0.1") // main
	n, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	l, err := n.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	gw := netip.MustParseAddr("10.91.0.1")
	def := func(table *int) *spec.Route {
		return &spec.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: gw, Table: table}
	}
	other := &spec.Route{Dst: netip.MustParsePrefix("192.168.0.0/16")}
	result := func(version string, routes ...*spec.Route) *spec.Result {
		return &spec.Result{CNIVersion: version, Interfaces: []*spec.Interface{{Name: "eth0", Sandbox: path}},
			IPs:    []*spec.IPConfig{{Interface: spec.IntPtr(0), Address: netip.MustParsePrefix("10.91.0.2/24"), Gateway: gw}},
			Routes: routes}
	}
	expect := func(what string, err error, want string) {
		t.Helper()
		if want == "" && err != nil {
			t.Errorf("%s: %v", what, err)
		}
		if want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want an error with %q", what, err, want)
		}
	}
	expect("default route in table 100, result says 100", n.CheckRoutes([]*spec.Route{def(spec.IntPtr(100)), other}), "")
	expect("default route in table 100, result says main", n.CheckRoutes([]*spec.Route{def(nil)}), "route to 0.0.0.0/0 via 10.91.0.1 not found")
	expect("192.168.0.0/16 in main, result says 100", n.CheckRoutes([]*spec.Route{{Dst: other.Dst, Table: spec.IntPtr(100)}}), "not found in table 100")

	// No rule yet: no version finds the moved route.
	expect("1.0.0, no rule", n.CheckResult(l, result("1.0.0", def(nil), other), 0), "not found")
	mustIP(t, ns, "rule", "add", "from", "10.91.0.9", "table", "100") // another address's rule
	expect("1.0.0, rule for another address", n.CheckResult(l, result("1.0.0", def(nil)), 0), "not found")
	mustIP(t, ns, "rule", "add", "from", "10.91.0.2", "table", "100")
	for _, v := range []string{"0.4.0", "1.0.0"} {
		expect(v+", rule from the address", n.CheckResult(l, result(v, def(nil), other), 0), "")
	}
	expect("1.1.0 names tables: no table means main", n.CheckResult(l, result("1.1.0", def(nil)), 0), "not found")
	expect("1.1.0 with the table", n.CheckResult(l, result("1.1.0", def(spec.IntPtr(100)), other), 0), "")
}
