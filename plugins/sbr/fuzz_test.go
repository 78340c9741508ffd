package sbr

import (
	"encoding/json"
	"errors"
	"net/netip"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig: the configuration never panics; it is refused with code 7,
// or it names a table the kernel takes that is not one of its own, and at
// most one unicast gateway per family; and the addresses chosen from any
// prevResult are prevResult's.
func FuzzConfig(f *testing.F) {
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
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var n netConf
		if json.Unmarshal(data, &n) != nil {
			return // the SDK refuses it with code 6
		}
		c, err := parse(&n)
		if err != nil {
			var ce *spec.Error
			if !errors.As(err, &ce) || ce.Code != spec.ErrInvalidNetworkConfig {
				t.Fatalf("error without code 7: %v", err)
			}
			return
		}
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
		var p struct {
			Prev json.RawMessage `json:"prevResult"`
		}
		if json.Unmarshal(data, &p) == nil && len(p.Prev) > 0 {
			if res, err := spec.ParseResult(p.Prev, "1.0.0"); err == nil {
				for _, ipc := range addresses(res, "eth0") {
					if ipc == nil || !ipc.Address.IsValid() {
						t.Fatalf("invalid address chosen from %s", p.Prev)
					}
				}
			}
		}
	})
}
