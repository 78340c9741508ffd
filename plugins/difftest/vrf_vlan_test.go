package difftest

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

// vrf and bridge vlans against the reference, in the VM (this machine's
// kernel has neither vrf nor bridge vlan filtering).
func TestVrfAndBridgeVlans(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		br := func(name, bridge, subnet, extra string) string {
			return `{"type":"bridge","bridge":"` + bridge + `"` + extra + `,"ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam",` +
				`"ranges":[[{"subnet":"` + subnet + `"}]],"routes":[{"dst":"192.168.0.0/16"}]}}`
		}
		vrfList := func(version, net, bridge, subnet string) string {
			return `{"cniVersion":"` + version + `","name":"` + net + `","plugins":[` + br(net, bridge, subnet, `,"isGateway":true`) +
				`,{"type":"vrf","vrfname":"blue"}]}`
		}
		cases := []dcase{{
			// Two interfaces (two networks) into one VRF of one container.
			name: "vrf-two-interfaces-1.0.0",
			conf: vrfList("1.0.0", "vrfa", "brva", "10.80.0.0/24"),
			atts: []att{
				{id: "v1", ifname: "eth0", cont: "c1"},
				{id: "v1", ifname: "eth1", cont: "c1", conf: vrfList("1.0.0", "vrfb", "brvb", "10.81.0.0/24")},
			},
			// The reference copies the kernel's fe80::/64 route of the second
			// interface into the VRF's table with "replace", which replaces
			// the first interface's: it loses its link-local route (ours
			// keeps one per interface; vrf README).
			deliberate: []string{`^route6: dev=eth[01] dst=fe80::/64 .*table=1$`},
		}, {
			// At 1.1.0 our result names the table the routes moved to, so
			// CHECK of the whole chain passes (bridge finds them there); the
			// reference's bridge CHECK looks in the main table and fails.
			name:          "vrf-1.1.0",
			conf:          vrfList("1.1.0", "vrfc", "brvc", "10.82.0.0/24"),
			atts:          one("v2", nil),
			resultIgnore:  `"table": |"dst": "192.168.0.0/16"`,
			refCheckFails: true,
		}, {
			name: "bridge-vlan-access-gateway",
			conf: `{"cniVersion":"1.1.0","name":"vlana","plugins":[` + br("vlana", "brvl", "10.83.0.0/24", `,"vlan":100,"isGateway":true`) + `]}`,
			atts: []att{{id: "a1", ifname: "eth0", cont: "c1"}, {id: "a2", ifname: "eth0", cont: "c2"}},
			// The reference's bridge MAC follows the lowest port MAC: its
			// CHECK of a1 fails once a2 joined (bridge README).
			refCheckFails: true,
		}, {
			// A trunk with native vlan 1, and (another network, another
			// bridge) an access vlan plus a trunk keeping vlan 1.
			name: "bridge-vlan-trunks",
			conf: `{"cniVersion":"1.0.0","name":"vlant","plugins":[` +
				br("vlant", "brvt", "10.84.0.0/24", `,"vlanTrunk":[{"minID":100,"maxID":105},{"id":300}]`) + `]}`,
			atts: []att{{id: "t1", ifname: "eth0", cont: "c1"}, {id: "p1", ifname: "eth0", cont: "c2",
				conf: `{"cniVersion":"1.0.0","name":"vlanp","plugins":[` +
					br("vlanp", "brvp", "10.85.0.0/24", `,"vlan":7,"vlanTrunk":[{"id":8}],"preserveDefaultVlan":true`) + `]}`}},
		}}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { t.Parallel(); runCase(t, c) })
		}
	})
}
