package vrf

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig: vrf's configuration parsing never panics and refuses with
// code 6 or 7 only; it accepts only a usable VRF name and a table a VRF
// can have. (No VM: it only parses.)
func FuzzConfig(f *testing.F) {
	for _, extra := range []map[string]any{
		{"vrfname": "blue"},
		{"vrfname": "blue", "table": 100},
		{"vrfname": "blue", "table": 254},
		{"vrfname": "blue", "table": -1},
		{"vrfname": "blue", "table": 4294967296},
		{"vrfname": "a/b"},
		{"vrfname": ""},
		{"vrfname": "blue", "table": "7"},
	} {
		m := map[string]any{"cniVersion": "1.1.0", "name": "vrffuzz", "type": "vrf"}
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
		if spec.ValidateInterfaceName(c.VRFName) != nil {
			t.Fatalf("accepted vrfname %q", c.VRFName)
		}
		if c.Table < 0 || c.Table > 1<<32-1 || c.Table >= 253 && c.Table <= 255 {
			t.Fatalf("accepted table %d", c.Table)
		}
	})
}
