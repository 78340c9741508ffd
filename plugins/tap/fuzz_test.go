package tap

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig: tap's configuration and CNI_ARGS parsing never panics and
// refuses with code 4 (CNI_ARGS), 6 or 7 only; what it accepts is within the kernel's
// limits (MTU, uid/gid, a unicast 6-byte MAC, a usable bridge name).
func FuzzConfig(f *testing.F) {
	for _, extra := range []map[string]any{
		{},
		{"mtu": 1400, "mac": "02:00:00:00:00:01", "multiQueue": true},
		{"owner": 1000, "group": 1000},
		{"owner": -1},
		{"owner": 4294967295},
		{"mac": "01:00:5e:00:00:01"},
		{"bridge": "br0"},
		{"bridge": "../../x"},
		{"runtimeConfig": map[string]any{"mac": "02:00:00:00:00:02"}},
		{"selinuxContext": "a\nb"},
		{"mtu": "1400"},
	} {
		m := map[string]any{"cniVersion": "1.1.0", "name": "tapfuzz", "type": "tap"}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		f.Add(b, "")
	}
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"t","type":"tap"}`), "IgnoreUnknown=1;MAC=02:00:00:00:00:03")
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"t","type":"tap"}`), "MAC=ff:ff:ff:ff:ff:ff")
	f.Fuzz(func(t *testing.T, stdin []byte, args string) {
		c, err := load(&skel.CmdArgs{StdinData: stdin, Args: args, ContainerID: "ctr", IfName: "tap0"})
		if err != nil {
			var se *spec.Error
			if !errors.As(err, &se) || (se.Code != spec.ErrInvalidNetworkConfig && se.Code != spec.ErrDecodingFailure && se.Code != spec.ErrInvalidEnvironment) {
				t.Fatalf("refused without code 4, 6 or 7: %v", err)
			}
			return
		}
		if c.MTU < 0 || c.MTU > 65535 || c.MTU > 0 && c.MTU < 68 {
			t.Fatalf("accepted mtu %d", c.MTU)
		}
		for _, id := range []*int64{c.Owner, c.Group} {
			if id != nil && (*id < 0 || *id > maxID) {
				t.Fatalf("accepted uid/gid %d", *id)
			}
		}
		if c.mac != nil {
			if _, err := skel.ParseUnicastMAC(c.mac.String()); err != nil {
				t.Fatalf("accepted mac %q: %v", c.mac, err)
			}
		}
		if c.Bridge != "" && spec.ValidateInterfaceName(c.Bridge) != nil {
			t.Fatalf("accepted bridge %q", c.Bridge)
		}
		if c.SelinuxContext != "" {
			t.Fatalf("accepted selinuxContext %q on a machine without SELinux", c.SelinuxContext)
		}
		_ = c.flags()
	})
}
