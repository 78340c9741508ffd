package bridge

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig feeds bridge's configuration handling (skel's parsing, then
// load, which runs before anything is created) arbitrary configs and
// CNI_ARGS: refusals are configuration errors naming no plugin; what is
// accepted is in the kernel's ranges.
func FuzzConfig(f *testing.F) {
	testutil.FuzzConfig(f, Plugin(), [][2]string{
		{`{"cniVersion":"1.1.0","name":"n","type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":true,"ipMasqBackend":"nftables","mtu":1400,
		  "hairpinMode":true,"vlan":100,"vlanTrunk":[{"id":5},{"minID":10,"maxID":20}],"macspoofchk":true,"ipam":{"type":"host-local","subnet":"10.1.0.0/16"}}`, ""},
		{`{"cniVersion":"1.0.0","name":"n","bridge":"br-x","runtimeConfig":{"mac":"0a:58:0a:01:00:05"},"args":{"cni":{"mac":"02:00:00:00:00:02"}}}`, "MAC=02:00:00:00:00:01"},
		{`{"cniVersion":"1.0.0","name":"n","mtu":-5,"vlan":5000,"bridge":"averyveryverylongname"}`, ""},
		{`{"cniVersion":"1.0.0","name":"n","runtimeConfig":{"mac":"ff:ff:ff:ff:ff:ff"},"ipam":{"type":"../x"}}`, ""},
		{`{"cniVersion":"1.0.0","name":"n","disableContainerInterface":true,"ipam":{"type":"static"},"hairpinMode":true,"promiscMode":true}`, ""},
		{`{}`, ""},
	}, load, func(t *testing.T, c *Config) {
		if c.MTU != 0 && (c.MTU < 68 || c.MTU > 65535) || c.Vlan < 0 || c.Vlan > 4094 {
			t.Fatalf("accepted mtu %d vlan %d", c.MTU, c.Vlan)
		}
		for _, v := range c.vlans {
			if v < 1 || v > 4094 {
				t.Fatalf("accepted trunk vlan %d", v)
			}
		}
		if err := spec.ValidateInterfaceName(c.Bridge); err != nil {
			t.Fatalf("accepted bridge %q: %v", c.Bridge, err)
		}
		if c.mac != "" {
			if _, err := skel.ParseUnicastMAC(c.mac); err != nil {
				t.Fatalf("accepted mac %q: %v", c.mac, err)
			}
		}
	})
}
