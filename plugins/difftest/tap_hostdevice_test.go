package difftest

import (
	"fmt"
	"testing"
)

// tap and host-device against the reference, on this machine's kernel.
func TestTapAndHostDevice(t *testing.T) {
	hl := func(subnets string) string {
		return `"ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","ranges":` + subnets + `,"routes":[{"dst":"192.168.0.0/16"}]}`
	}
	// A host veth (dev0, down, no alias: the state the reference's DEL
	// leaves a device in, so both DELs end alike) with its peer kept.
	// peer0's operstate follows dev0's with the kernel's link-watch delay:
	// not a plugin difference.
	operstate := []string{` operstate=\S+`}
	hostDev := func(t *testing.T, s *side) {
		ipIn(t, s.host, "link", "add", "dev0", "mtu", "1400", "type", "veth", "peer", "name", "peer0")
		ipIn(t, s.host, "link", "set", "peer0", "up")
	}
	cases := []dcase{{
		name: "tap-dualstack",
		conf: `{"cniVersion":"1.1.0","name":"tapnet","plugins":[{"type":"tap",` + hl(`[[{"subnet":"10.70.0.0/24"}],[{"subnet":"fd00:70::/64"}]]`) + `}]}`,
		atts: one("tap1", nil),
	}, {
		name: "tap-multiqueue-mac-mtu",
		conf: `{"cniVersion":"1.0.0","name":"tapmq","plugins":[{"type":"tap","multiQueue":true,"mac":"00:11:22:33:44:66","mtu":1400}]}`,
		atts: one("tap2", nil),
	}, {
		// With owner and group the reference creates through netlink, which
		// ignores "mtu" and "mac" (ours applies them: not set here).
		name: "tap-owner-group",
		conf: `{"cniVersion":"1.0.0","name":"tapown","plugins":[{"type":"tap","owner":1000,"group":1000,` + hl(`[[{"subnet":"10.71.0.0/24"}]]`) + `}]}`,
		atts: one("tap3", nil),
	}, {
		name: "tap-on-container-bridge",
		conf: `{"cniVersion":"1.0.0","name":"tapbr","plugins":[{"type":"tap","bridge":"br0"}]}`,
		setup: func(t *testing.T, s *side) {
			c, _ := s.container(t, "c1")
			ipIn(t, c, "link", "add", "br0", "type", "bridge")
		},
		atts: one("tap4", nil),
	}, {
		name: "tap-runtimeconfig-mac",
		conf: `{"cniVersion":"1.1.0","name":"tapcap","plugins":[{"type":"tap","capabilities":{"mac":true}}]}`,
		atts: one("tap5", map[string]any{"mac": fixedMAC}),
	}, {
		name:       "host-device-by-name",
		conf:       `{"cniVersion":"1.1.0","name":"hdnet","plugins":[{"type":"host-device","device":"dev0","dataDir":"{{DIR}}/hd",` + hl(`[[{"subnet":"10.72.0.0/24"}],[{"subnet":"fd00:72::/64"}]]`) + `}]}`,
		setup:      hostDev,
		deliberate: operstate,
		atts:       one("hd1", nil),
		// The reference's DEL fails once the device is back ("failed to
		// find eth0"); ours succeeds (tested in plugins/hostdevice).
		noSecondDel: true,
	}, {
		name:        "host-device-layer2",
		conf:        `{"cniVersion":"1.0.0","name":"hdl2","plugins":[{"type":"host-device","device":"dev0","dataDir":"{{DIR}}/hd"}]}`,
		setup:       hostDev,
		deliberate:  operstate,
		atts:        []att{{id: "hd2", ifname: "net1", cont: "c1"}},
		noSecondDel: true,
	}}
	for _, v := range []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		cases = append(cases, dcase{
			name: "tap-" + v,
			conf: fmt.Sprintf(`{"cniVersion":%q,"name":"tapv","plugins":[{"type":"tap",%s}]}`, v, hl(`[[{"subnet":"10.73.0.0/24"}]]`)),
			atts: one("tapv", nil),
		}, dcase{
			name:        "host-device-" + v,
			conf:        fmt.Sprintf(`{"cniVersion":%q,"name":"hdv","plugins":[{"type":"host-device","device":"dev0","dataDir":"{{DIR}}/hd",%s}]}`, v, hl(`[[{"subnet":"10.74.0.0/24"}]]`)),
			setup:       hostDev,
			deliberate:  operstate,
			atts:        one("hdv", nil),
			noSecondDel: true,
		})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { t.Parallel(); runCase(t, c) })
	}
}
