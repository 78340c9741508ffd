package bridge

import (
	"encoding/json"
	"errors"
	"sort"
	"testing"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzVlanConfig: the bridge configuration with vlan keys never panics and
// is refused with code 6 or 7 only; an accepted one has an access vlan in
// 0-4094 and a trunk of sorted, distinct ids in 1-4094.
func FuzzVlanConfig(f *testing.F) {
	for _, extra := range []map[string]any{
		{"vlan": 100},
		{"vlan": 4095},
		{"vlan": -1},
		{"vlanTrunk": []map[string]int{{"minID": 100, "maxID": 105}, {"id": 300}}},
		{"vlanTrunk": []map[string]int{{"minID": 5, "maxID": 1}}},
		{"vlanTrunk": []map[string]int{{"minID": 5}}},
		{"vlanTrunk": []map[string]int{{"id": 0}}},
		{"vlanTrunk": []any{nil, map[string]int{"minID": 1, "maxID": 4094}}},
		{"vlan": 7, "vlanTrunk": []map[string]int{{"id": 7}}, "preserveDefaultVlan": true},
	} {
		m := map[string]any{"cniVersion": "1.1.0", "name": "vlanfuzz", "type": "bridge"}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		c, err := load(&skel.CmdArgs{StdinData: stdin, ContainerID: "ctr", IfName: "eth0"})
		if err != nil {
			var se *spec.Error
			if !errors.As(err, &se) || (se.Code != spec.ErrInvalidNetworkConfig && se.Code != spec.ErrDecodingFailure) {
				t.Fatalf("refused without code 6 or 7: %v", err)
			}
			return
		}
		if c.Vlan < 0 || c.Vlan > 4094 {
			t.Fatalf("accepted vlan %d", c.Vlan)
		}
		if !sort.IntsAreSorted(c.vlans) {
			t.Fatalf("trunk not sorted: %v", c.vlans)
		}
		for i, v := range c.vlans {
			if v < 1 || v > 4094 || i > 0 && c.vlans[i-1] == v {
				t.Fatalf("trunk %v", c.vlans)
			}
		}
	})
}
