package difftest

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// ipIn runs `ip` in a namespace, failing the test on error.
func ipIn(t *testing.T, ns string, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s %v: %v: %s", ns, args, err, out)
	}
}

// Edge cases, each run the same way on both sides (setup included).
func TestProbes(t *testing.T) {
	bridgeConf := func(net, br, subnet string, extra string) string {
		return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q%s,
		  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":%q}}]}`, net, br, extra, subnet)
	}
	cases := []dcase{{
		// The bridge exists with MTU 9000: neither changes it; the veth
		// gets the configured mtu.
		name:  "existing-bridge-other-mtu",
		conf:  bridgeConf("mtunet", "brmtu", "10.20.0.0/24", `,"mtu":1400,"isGateway":true`),
		setup: func(t *testing.T, s *side) { ipIn(t, s.host, "link", "add", "brmtu", "mtu", "9000", "type", "bridge") },
		atts:  one("mtu1", nil),
	}, {
		// Two networks (no gateway) share a bridge.
		name: "two-networks-one-bridge",
		conf: bridgeConf("neta", "brshared", "10.21.0.0/24", ""),
		atts: []att{
			{id: "a1", ifname: "eth0", cont: "c1"},
			{id: "b1", ifname: "eth1", cont: "c1", conf: bridgeConf("netb", "brshared", "10.22.0.0/24", "")},
		},
		refCheckFails: true,
	}, {
		// Two gateway networks on one bridge: the second gateway address
		// is refused (without forceAddress) and nothing of it is left.
		name: "two-gateway-networks-one-bridge",
		conf: bridgeConf("neta", "brshared", "10.21.0.0/24", `,"isGateway":true`),
		atts: []att{
			{id: "a1", ifname: "eth0", cont: "c1"},
			{id: "b1", ifname: "eth1", cont: "c1", conf: bridgeConf("netb", "brshared", "10.22.0.0/24", `,"isGateway":true`)},
		},
		refLeaks: true,
	}, {
		// The container already has a default route (another interface).
		name: "isDefaultGateway-existing-default-route",
		conf: bridgeConf("dgw", "brdgw", "10.23.0.0/24", `,"isDefaultGateway":true`),
		setup: func(t *testing.T, s *side) {
			c, _ := s.container(t, "c1")
			ipIn(t, c, "link", "add", "other0", "type", "veth", "peer", "name", "other1")
			ipIn(t, c, "addr", "add", "192.168.99.2/24", "dev", "other0")
			ipIn(t, c, "link", "set", "other0", "up")
			ipIn(t, c, "link", "set", "other1", "up")
			ipIn(t, c, "route", "add", "default", "via", "192.168.99.1")
		},
		atts: one("dgw1", nil),
	}, {
		// CNI_IFNAME already exists in the container: an error (spec), and
		// the existing interface is untouched.
		name: "ifname-exists",
		conf: bridgeConf("exists", "brex", "10.24.0.0/24", `,"isGateway":true`),
		setup: func(t *testing.T, s *side) {
			c, _ := s.container(t, "c1")
			ipIn(t, c, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
		},
		atts:     one("ex1", nil),
		noDel:    true, // DEL would delete the pre-existing eth0 (both do)
		refLeaks: true, // the reference has made the bridge by then
		// Ours: code 4 (CNI_IFNAME is taken), refused before any change;
		// the reference's 999 comes after it made the bridge.
		addCodes: [2]string{"code 4", "code 999"},
	}, {
		// ptp when CNI_IFNAME already exists.
		name: "ptp-ifname-exists",
		conf: `{"cniVersion":"1.0.0","name":"pexists","plugins":[{"type":"ptp","ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.25.0.0/24"}}]}`,
		setup: func(t *testing.T, s *side) {
			c, _ := s.container(t, "c1")
			ipIn(t, c, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
		},
		atts:     one("pex1", nil),
		noDel:    true,
		refLeaks: true, // the reference has turned ip_forward on by then
		addCodes: [2]string{"code 4", "code 999"},
	}, {
		// host-local under a network name with dots: dataDir/<name>/.
		name: "hostlocal-dotted-name",
		conf: bridgeConf("my.net.v1", "brdot", "10.26.0.0/24", ""),
		atts: one("dot1", nil),
	}, {
		// The same hostPort for two containers: both ADDs succeed.
		name: "portmap-same-hostport",
		conf: `{"cniVersion":"1.0.0","name":"pmsame","plugins":[
		 {"type":"bridge","bridge":"brpms","isGateway":true,"ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.27.0.0/24"}},
		 {"type":"portmap","capabilities":{"portMappings":true}}]}`,
		atts: []att{
			{id: "pms1", ifname: "eth0", cont: "c1", caps: map[string]any{"portMappings": portmaps[:1]}},
			{id: "pms2", ifname: "eth0", cont: "c2", caps: map[string]any{"portMappings": portmaps[:1]}},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { t.Parallel(); runCase(t, c) })
	}
}

// The tuning sysctl keys each implementation accepts or refuses, one ADD
// per key (loopback + tuning on "lo"), compared by CNI code.
func TestTuningSysctlDecisions(t *testing.T) {
	keys := []struct{ key, value string }{
		{"net.core.somaxconn", "600"},
		{"net.ipv4.conf.lo.arp_notify", "1"},
		{"net.ipv4.conf.IFNAME.arp_filter", "1"},
		{"net/ipv4/conf/lo/arp_ignore", "1"},
		{"net.ipv4.conf.all.rp_filter", "1"},
		{"net.ipv4.conf.default.rp_filter", "1"},
		{"net.ipv4.conf.eth9.arp_notify", "1"},
		{"net.ipv4.ip_forward", "1"},
		{"net.ipv4.tcp_keepalive_time", "600"},
		{"net.ipv4.ping_group_range", "0 2147483647"},
		{"net.ipv4.ip_local_port_range", "20000 40000"},
		{"net.ipv6.conf.lo.disable_ipv6", "1"},
		{"net.ipv6.conf.all.forwarding", "1"},
		{"net.ipv6.neigh.lo.base_reachable_time_ms", "20000"},
		{"net.unix.max_dgram_qlen", "100"},
		{"net.core.rmem_max", "1000000"},
		{"net.netfilter.nf_conntrack_max", "1000"},
		{"net.core.no_such_key", "1"},
		{"kernel.shm_rmid_forced", "1"},
		{"vm.swappiness", "10"},
		{"net/../kernel/hostname", "x"},
		{"net.ipv4.conf.lo.arp_notify", "notanumber"},
	}
	ss := sides(t)
	for i, k := range keys {
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"tunekeys","plugins":[{"type":"loopback"},
		  {"type":"tuning","dataDir":"{{DIR}}/tuning","sysctl":{%q:%q}}]}`, k.key, k.value)
		var codes [2]string
		var errs [2]error
		for j, s := range ss {
			l := s.list(t, conf)
			a := att{id: fmt.Sprint("key", i), ifname: "lo", cont: fmt.Sprint("c", i)}
			_, errs[j] = s.add(t, l, a)
			codes[j] = errCode(errs[j])
			if err := s.verb(t, "DEL", l, a); err != nil {
				t.Errorf("%s: DEL %s: %v", s.name, k.key, err)
			}
		}
		t.Logf("%-42s ours %-7s ref %-7s", k.key+"="+k.value, codes[0], codes[1])
		if (codes[0] == "ok") != (codes[1] == "ok") {
			t.Errorf("sysctl %s=%q: ours %s (%v), ref %s (%v)", k.key, k.value, codes[0], errs[0], codes[1], errs[1])
		} else if errs[0] != nil && !strings.Contains(errs[0].Error(), k.key) {
			t.Errorf("sysctl %s: our error does not name the key: %v", k.key, errs[0])
		}
	}
}

// Bad input: both implementations refuse it; ours with a message naming the
// field, and without changing anything (the reference's codes are mostly
// 999, ours the specific ones: logged, not compared).
func TestBadInput(t *testing.T) {
	hl := func(ipam string) string {
		return `{"cniVersion":"1.0.0","name":"bad","plugins":[{"type":"bridge","bridge":"brbad","ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam",` + ipam + `}}]}`
	}
	br := func(extra string) string {
		return `{"cniVersion":"1.0.0","name":"bad","plugins":[{"type":"bridge","bridge":"brbad"` + extra + `,"ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.30.0.0/24"}}]}`
	}
	cases := []struct {
		name, conf, field string
		caps              map[string]any
	}{
		// The reference takes a negative mtu as the default; we refuse it
		// (documented in bridge's README).
		{"bridge-mtu", br(`,"mtu":-5`), "mtu", nil},
		{"bridge-name-too-long", `{"cniVersion":"1.0.0","name":"bad","plugins":[{"type":"bridge","bridge":"averyveryverylongname"}]}`, "bridge", nil},
		{"bridge-vlan", br(`,"vlan":5000`), "vlan", nil},
		{"bridge-hairpin-promisc", br(`,"hairpinMode":true,"promiscMode":true`), "hairpinMode", nil},
		{"bridge-mac", br(`,"args":{"cni":{"mac":"zz:zz"}}`), "zz:zz", nil},
		{"bridge-masq-backend", br(`,"ipMasq":true,"ipMasqBackend":"pf"`), "ipMasqBackend", nil},
		{"hostlocal-subnet", hl(`"subnet":"10.0.0.0/33"`), "10.0.0.0/33", nil},
		{"hostlocal-rangestart", hl(`"ranges":[[{"subnet":"10.31.0.0/24","rangeStart":"10.32.0.5"}]]`), "rangeStart", nil},
		{"hostlocal-no-range", hl(`"routes":[]`), "subnet", nil},
		{"hostlocal-route", hl(`"subnet":"10.33.0.0/24","routes":[{"dst":"1.2.3.4/99"}]`), "1.2.3.4/99", nil},
		{"ptp-no-ipam", `{"cniVersion":"1.0.0","name":"bad","plugins":[{"type":"ptp"}]}`, "ipam", nil},
		{"static-address", `{"cniVersion":"1.0.0","name":"bad","plugins":[{"type":"bridge","bridge":"brbad","ipam":{"type":"static","addresses":[{"address":"10.34.0.1"}]}}]}`, "10.34.0.1", nil},
		{"portmap-hostport", `{"cniVersion":"1.0.0","name":"bad","plugins":[{"type":"bridge","bridge":"brbad","ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.35.0.0/24"}},
		  {"type":"portmap","capabilities":{"portMappings":true}}]}`, "70000",
			map[string]any{"portMappings": []any{map[string]any{"hostPort": 70000, "containerPort": 80, "protocol": "tcp"}}}},
		{"tuning-mtu", `{"cniVersion":"1.0.0","name":"bad","plugins":[{"type":"loopback"},{"type":"tuning","dataDir":"{{DIR}}/tuning","mtu":-1}]}`, "mtu", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ss := sides(t)
			ifname := "eth0"
			if strings.Contains(c.conf, "loopback") {
				ifname = "lo"
			}
			a := att{id: "bad1", ifname: ifname, cont: "c1", caps: c.caps}
			ss[0].container(t, "c1")
			before := ss[0].world(t)
			var errs [2]error
			for i, s := range ss {
				_, errs[i] = s.add(t, s.list(t, c.conf), a)
			}
			t.Logf("ours %s: %v | ref %s: %v", errCode(errs[0]), errs[0], errCode(errs[1]), errs[1])
			if errs[0] == nil || (errs[1] == nil && c.name != "bridge-mtu") {
				t.Fatalf("want both to refuse: ours %v, ref %v", errs[0], errs[1])
			}
			if !strings.Contains(errs[0].Error(), c.field) {
				t.Errorf("our error does not name %q: %v", c.field, errs[0])
			}
			if code := errCode(errs[0]); code == "code 999" {
				t.Errorf("bad input gets the generic code 999: %v", errs[0])
			}
			keep := regexp.MustCompile(`^file: \S+/(lock|last_reserved_ip\.\d+) =`)
			if !strings.Contains(c.conf, "portmap") {
				// A chain's earlier plugins keep their pieces until the
				// runtime's DEL (checked below); a single plugin leaves
				// nothing.
				ss[0].settle(t)
				diffWorlds(t, "our refused ADD (ours: after, ref: before)", ss[0].world(t), before, keep)
			}
			// The runtime sends DEL after a failed ADD: it must succeed
			// (a DEL that keeps failing blocks the pod's teardown).
			var dels [2]error
			for i, s := range ss {
				dels[i] = s.verb(t, "DEL", s.list(t, c.conf), a)
			}
			if dels[0] != nil {
				t.Errorf("DEL after the refused ADD: ours %v; ref %v", dels[0], dels[1])
			}
			// DEL leaves the (shared) bridge, and loopback's DEL sets lo
			// down, in both implementations.
			ss[0].settle(t)
			diffWorlds(t, "our refused ADD + DEL (ours: after, ref: before)", ss[0].world(t), before,
				regexp.MustCompile(keep.String()+`|brbad|dev=lo |ifname=lo `))
		})
	}
}
