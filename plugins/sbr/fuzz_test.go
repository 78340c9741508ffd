package sbr

import (
	"net/netip"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig: the configuration, through skel as a real invocation
// (testutil.FuzzConfig), never panics; it is refused with a configuration
// error that does not name the plugin, or it names a table the kernel
// takes that is not one of its own, and at most one unicast gateway per
// family; and the addresses chosen from any prevResult are prevResult's.
func FuzzConfig(f *testing.F) {
	var seeds [][2]string
	for _, s := range []string{
		`{}`,
		`{"table":100}`,
		`{"table":4294967295,"gateways":["10.0.0.1","fd00::1"],"addSourceHints":true}`,
		`{"table":-1}`,
		`{"table":"x","gateways":[1,2,3]}`,
		`{"gateways":["::ffff:10.0.0.1","10.0.0.2"]}`,
		`{"gateways":null,"addSourceHints":null,"table":null}`,
		`{"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.1.1.2/24","interface":0},{"address":"10.1.1.3/24","interface":7}]}}`,
	} {
		base := `{"cniVersion":"1.0.0","name":"fuzznet","type":"sbr"}`
		if s != "{}" {
			base = base[:len(base)-1] + "," + s[1:]
		}
		seeds = append(seeds, [2]string{base, ""})
	}
	type loaded struct {
		c    *config
		prev *spec.Result
	}
	loadAll := func(a *skel.CmdArgs) (loaded, error) {
		c, err := load(a)
		return loaded{c, a.Conf.PrevResult}, err
	}
	testutil.FuzzConfig(f, Plugin(), seeds, loadAll, func(t *testing.T, l loaded) {
		c := l.c
		if c.table < 0 || c.table > 1<<32-1 || c.table != 0 && reserved(c.table) {
			t.Fatalf("table %d accepted", c.table)
		}
		for _, gw := range []netip.Addr{c.gw4, c.gw6} {
			if gw.IsValid() && (gw.Zone() != "" || gw.IsUnspecified() || gw.IsMulticast() || gw.Is4In6()) {
				t.Fatalf("gateway %s accepted", gw)
			}
		}
		if c.gw4.IsValid() && !c.gw4.Is4() || c.gw6.IsValid() && !c.gw6.Is6() {
			t.Fatalf("gateways in the wrong family: %s %s", c.gw4, c.gw6)
		}
		if l.prev != nil {
			for _, ipc := range addresses(l.prev, "eth0") {
				if ipc == nil || !ipc.Address.IsValid() {
					t.Fatalf("invalid address chosen from %+v", l.prev)
				}
			}
		}
	})
}
