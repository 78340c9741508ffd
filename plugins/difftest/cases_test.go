package difftest

import (
	"fmt"
	"testing"
)

var portmaps = []any{
	map[string]any{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
	map[string]any{"hostPort": 8053, "containerPort": 53, "protocol": "udp"},
}

// Real-world conflists, run unchanged through both implementations.
func TestConflists(t *testing.T) {
	cases := []dcase{{
		name: "spec-example",
		conf: `{"cniVersion":"1.1.0","name":"dbnet","plugins":[
		 {"type":"bridge","bridge":"cni0","keyA":["some more","plugin specific","configuration"],
		  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.1.0.0/16","gateway":"10.1.0.1","routes":[{"dst":"0.0.0.0/0"}]},
		  "dns":{"nameservers":["10.1.0.1"]}},
		 {"type":"tuning","dataDir":"{{DIR}}/tuning","capabilities":{"mac":true},"sysctl":{"net.core.somaxconn":"500"}},
		 {"type":"portmap","capabilities":{"portMappings":true}}]}`,
		atts: one("specex", map[string]any{"mac": "00:11:22:33:44:66", "portMappings": portmaps}),
	}, {
		name: "kubelet-bridge",
		conf: `{"cniVersion":"0.3.1","name":"k8s-pod-network","plugins":[
		 {"type":"bridge","bridge":"cbr0","mtu":1460,"isDefaultGateway":true,"ipMasq":true,"hairpinMode":true,
		  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","ranges":[[{"subnet":"10.244.1.0/24"}]]}},
		 {"type":"portmap","capabilities":{"portMappings":true},"snat":true}]}`,
		atts: []att{
			{id: "pod1", ifname: "eth0", cont: "c1", caps: map[string]any{"portMappings": portmaps[:1]}},
			{id: "pod2", ifname: "eth0", cont: "c2"},
		},
	}, {
		name: "podman-default",
		conf: `{"cniVersion":"0.4.0","name":"podman","plugins":[
		 {"type":"bridge","bridge":"cni-podman0","isGateway":true,"ipMasq":true,"hairpinMode":true,
		  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","routes":[{"dst":"0.0.0.0/0"}],
		   "ranges":[[{"subnet":"10.88.0.0/16","gateway":"10.88.0.1"}]]}},
		 {"type":"portmap","capabilities":{"portMappings":true}},
		 {"type":"tuning","dataDir":"{{DIR}}/tuning"}]}`,
		atts: one("podman1", map[string]any{"portMappings": portmaps}),
	}, {
		name: "ptp-dualstack",
		conf: `{"cniVersion":"1.0.0","name":"ptpnet","plugins":[
		 {"type":"ptp","ipMasq":true,"mtu":1400,
		  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam",
		   "ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"fd00:1:2::/64"}]],
		   "routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}}]}`,
		atts:       []att{{id: "ptp1", ifname: "eth0", cont: "c1"}, {id: "ptp2", ifname: "eth0", cont: "c2"}},
		deliberate: ptpDeliberate,
	}, {
		name: "hostlocal-two-range-sets",
		conf: `{"cniVersion":"1.0.0","name":"two.sets","plugins":[
		 {"type":"bridge","bridge":"br2",
		  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam",
		   "ranges":[[{"subnet":"10.5.0.0/30"},{"subnet":"10.6.0.0/24","rangeStart":"10.6.0.10","rangeEnd":"10.6.0.20","gateway":"10.6.0.254"}],
		             [{"subnet":"fd00:5::/120"}]],
		   "routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16"}]}}]}`,
		// 10.5.0.0/30 has one usable address (.1 is the gateway): the
		// second container spills over into the second range of the set.
		// (No isGateway: the two ranges' gateways could not both be on
		// the bridge.)
		atts:          []att{{id: "r1", ifname: "eth0", cont: "c1"}, {id: "r2", ifname: "eth0", cont: "c2"}},
		refCheckFails: true,
	}, {
		name: "bridge-static-routes-dns",
		conf: `{"cniVersion":"1.0.0","name":"staticnet","plugins":[
		 {"type":"bridge","bridge":"brs",
		  "ipam":{"type":"static",
		   "addresses":[{"address":"10.10.0.1/24","gateway":"10.10.0.254"},{"address":"3ffe:ffff:0:1ff::1/64","gateway":"3ffe:ffff:0:1ff::fe"}],
		   "routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.10.0.5"},{"dst":"3ffe:ffff:0:2ff::/64"}],
		   "dns":{"nameservers":["8.8.8.8"],"domain":"example.com","search":["example.com"],"options":["ndots:2"]}}}]}`,
		atts: one("static1", nil),
	}, {
		name: "ptp-tuning-sysctl-mtu",
		conf: `{"cniVersion":"1.0.0","name":"tunenet","plugins":[
		 {"type":"ptp","ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.7.0.0/24"}},
		 {"type":"tuning","dataDir":"{{DIR}}/tuning","mtu":1300,"promisc":true,"allmulti":true,"txQLen":2000,
		  "sysctl":{"net.ipv4.conf.eth0.arp_filter":"1","net.ipv4.conf.IFNAME.proxy_arp":"1","net.core.somaxconn":"512"}}]}`,
		atts:       one("tune1", nil),
		deliberate: ptpDeliberate,
	}, {
		name: "portmap-hostip-iptables",
		conf: `{"cniVersion":"1.0.0","name":"pmnet","plugins":[
		 {"type":"bridge","bridge":"brpm","isGateway":true,"ipMasq":true,
		  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.8.0.0/24"}},
		 {"type":"portmap","backend":"iptables","capabilities":{"portMappings":true}}]}`,
		atts: one("pm1", map[string]any{"portMappings": []any{
			map[string]any{"hostPort": 9090, "containerPort": 90, "protocol": "tcp", "hostIP": "127.0.0.1"},
			map[string]any{"hostPort": 9091, "containerPort": 91, "protocol": "tcp"}}}),
	}, {
		name: "portmap-hostip-nftables",
		conf: `{"cniVersion":"1.1.0","name":"pmnft","plugins":[
		 {"type":"bridge","bridge":"brpm","isGateway":true,"ipMasq":true,"ipMasqBackend":"nftables",
		  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","ranges":[[{"subnet":"10.9.0.0/24"}],[{"subnet":"fd00:9::/64"}]]}},
		 {"type":"portmap","backend":"nftables","capabilities":{"portMappings":true}}]}`,
		atts: one("pm2", map[string]any{"portMappings": []any{
			map[string]any{"hostPort": 9090, "containerPort": 90, "protocol": "tcp", "hostIP": "127.0.0.1"},
			map[string]any{"hostPort": 9091, "containerPort": 91, "protocol": "udp"}}}),
	}, {
		name: "loopback",
		conf: `{"cniVersion":"1.1.0","name":"lo","plugins":[{"type":"loopback"}]}`,
		atts: []att{{id: "lo1", ifname: "lo", cont: "c1"}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { t.Parallel(); runCase(t, c) })
	}
}

// Every spec version's result shape, for bridge (with and without gateway)
// and ptp.
func TestVersions(t *testing.T) {
	for _, v := range []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		for _, p := range []string{
			`{"type":"bridge","bridge":"brv","isGateway":true,"ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","ranges":[[{"subnet":"10.11.0.0/24"}],[{"subnet":"fd00:11::/64"}]],"routes":[{"dst":"0.0.0.0/0"}]}}`,
			`{"type":"ptp","ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.12.0.0/24","routes":[{"dst":"0.0.0.0/0"}]}}`,
		} {
			name := v + "-" + p[9:12]
			conf := fmt.Sprintf(`{"cniVersion":%q,"name":"vnet","plugins":[%s]}`, v, p)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				runCase(t, dcase{name: name, conf: conf, atts: one("v1", nil), deliberate: ptpDeliberate})
			})
		}
	}
}
