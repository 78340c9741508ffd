package ptp

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// FuzzConfig feeds ptp's configuration handling arbitrary configs and
// CNI_ARGS: refusals are configuration errors naming no plugin; what is
// accepted has an IPAM type and an MTU the kernel takes.
func FuzzConfig(f *testing.F) {
	for _, s := range []struct{ conf, args string }{
		{`{"cniVersion":"1.1.0","name":"n","type":"ptp","ipMasq":true,"mtu":1400,"ipam":{"type":"host-local","subnet":"10.1.0.0/24"},"dns":{"nameservers":["10.1.0.1"]}}`, ""},
		{`{"cniVersion":"1.0.0","name":"n","ipMasqBackend":"iptables","ipam":{"type":"static"}}`, "IgnoreUnknown=1"},
		{`{"cniVersion":"1.0.0","name":"n","mtu":70000,"ipam":{"type":"a/b"}}`, ""},
		{`{"cniVersion":"1.0.0","name":"n"}`, ""},
		{`{}`, ""},
	} {
		f.Add(uint8(0), []byte(s.conf), s.args)
	}
	f.Fuzz(func(t *testing.T, verb uint8, conf []byte, cniArgs string) {
		a := testutil.FuzzArgs(t, Plugin(), verb, conf, cniArgs)
		if a == nil {
			return
		}
		c, err := load(a)
		testutil.ConfigError(t, "ptp", err)
		if err != nil {
			return
		}
		if c.IPAM.Type == "" || (c.MTU != 0 && (c.MTU < 68 || c.MTU > 65535)) {
			t.Fatalf("accepted ipam %q mtu %d", c.IPAM.Type, c.MTU)
		}
	})
}
