package difftest

import (
	"fmt"
	"strings"
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
		name: "tap-ipv6-only",
		conf: `{"cniVersion":"1.0.0","name":"tap6","plugins":[{"type":"tap",` + hl(`[[{"subnet":"fd00:75::/64"}]]`) + `}]}`,
		atts: one("tap6", nil),
	}, {
		name:        "host-device-ipv6-only",
		conf:        `{"cniVersion":"1.1.0","name":"hd6","plugins":[{"type":"host-device","device":"dev0","dataDir":"{{DIR}}/hd",` + hl(`[[{"subnet":"fd00:76::/64"}]]`) + `}]}`,
		setup:       hostDev,
		deliberate:  operstate,
		atts:        one("hd6", nil),
		noSecondDel: true,
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

// Bad input for tap and host-device: both implementations refuse it; ours
// with code 7 naming the key or value and without changing anything.
func TestTapAndHostDeviceBadInput(t *testing.T) {
	tap := func(extra string) string {
		return `{"cniVersion":"1.0.0","name":"bad","plugins":[{"type":"tap"` + extra + `}]}`
	}
	hd := func(extra string) string {
		return `{"cniVersion":"1.0.0","name":"bad","plugins":[{"type":"host-device","dataDir":"{{DIR}}/hd"` + extra + `}]}`
	}
	for _, c := range []struct{ name, conf, field string }{
		{"tap-mtu", tap(`,"mtu":-1`), "mtu"},
		{"tap-mac", tap(`,"mac":"zz:zz"`), "zz:zz"},
		{"tap-bridge-missing", tap(`,"bridge":"nosuchbr"`), "nosuchbr"},
		{"tap-selinux-off", tap(`,"selinuxContext":"system_u:system_r:container_t:s0"`), "selinuxContext"},
		{"hd-no-device", hd(``), "device"},
		{"hd-device-missing", hd(`,"device":"nosuch0"`), "nosuch0"},
		{"hd-pci-missing", hd(`,"pciBusID":"0000:ff:1f.7"`), "0000:ff:1f.7"},
		{"hd-kernelpath-escape", hd(`,"kernelpath":"/sys/devices/../../etc"`), "kernelpath"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ss := sides(t)
			a := att{id: "bad1", ifname: "eth0", cont: "c1"}
			ss[0].container(t, "c1")
			before := ss[0].world(t)
			var errs [2]error
			for i, s := range ss {
				_, errs[i] = s.add(t, s.list(t, c.conf), a)
			}
			t.Logf("ours %s: %v | ref %s: %v", errCode(errs[0]), errs[0], errCode(errs[1]), errs[1])
			if errs[0] == nil || errs[1] == nil {
				t.Fatalf("want both to refuse: ours %v, ref %v", errs[0], errs[1])
			}
			if e := errs[0].Error(); !strings.Contains(e, c.field) || errCode(errs[0]) != "code 7" {
				t.Errorf("ours: %s %v, want code 7 naming %q", errCode(errs[0]), errs[0], c.field)
			}
			diffWorlds(t, "our refused ADD (ours: after, ref: before)", ss[0].world(t), before, nil)
			if err := ss[0].verb(t, "DEL", ss[0].list(t, c.conf), a); err != nil {
				t.Errorf("our DEL after the refused ADD: %v", err)
			}
		})
	}
}
