package ptp

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// FuzzConfig feeds ptp's configuration handling arbitrary configs and
// CNI_ARGS: refusals are configuration errors naming no plugin; what is
// accepted has an IPAM type and an MTU the kernel takes.
func FuzzConfig(f *testing.F) {
	testutil.FuzzConfig(f, Plugin(), [][2]string{
		{`{"cniVersion":"1.1.0","name":"n","type":"ptp","ipMasq":true,"mtu":1400,"ipam":{"type":"host-local","subnet":"10.1.0.0/24"},"dns":{"nameservers":["10.1.0.1"]}}`, ""},
		{`{"cniVersion":"1.0.0","name":"n","ipMasqBackend":"iptables","ipam":{"type":"static"}}`, "IgnoreUnknown=1"},
		{`{"cniVersion":"1.0.0","name":"n","mtu":70000,"ipam":{"type":"a/b"}}`, ""},
		{`{"cniVersion":"1.0.0","name":"n"}`, ""},
		{`{}`, ""},
	}, load, func(t *testing.T, c *Config) {
		if c.IPAM.Type == "" || (c.MTU != 0 && (c.MTU < 68 || c.MTU > 65535)) {
			t.Fatalf("accepted ipam %q mtu %d", c.IPAM.Type, c.MTU)
		}
	})
}
