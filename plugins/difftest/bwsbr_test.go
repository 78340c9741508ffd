package difftest

import (
	"encoding/json"
	"strings"
	"testing"
)

// tcAndRules is the part of a namespace's state the meta plugins change
// beyond links, addresses and routes: policy rules, qdiscs, and the
// ingress filters of every device.
func tcAndRules(t *testing.T, ns string) []string {
	t.Helper()
	lines := jsonLines(t, ns, "rule4: ", "ip -4 -j rule show")
	lines = append(lines, jsonLines(t, ns, "rule6: ", "ip -6 -j rule show")...)
	lines = append(lines, jsonLines(t, ns, "qdisc: ", "tc -j qdisc show")...)
	for _, dev := range strings.Fields(sh(t, ns, "ls /sys/class/net")) {
		out := strings.TrimSpace(sh(t, ns, "tc -j filter show dev "+dev+" ingress 2>/dev/null || true"))
		if out == "" {
			continue
		}
		var fs []map[string]any
		if err := json.Unmarshal([]byte(out), &fs); err != nil {
			t.Fatalf("tc filters of %s: %v: %s", dev, err, out)
		}
		for _, f := range fs {
			lines = append(lines, "filter: dev="+dev+" "+line(f))
		}
	}
	return lines
}

var bwCaps = map[string]any{"bandwidth": map[string]any{"ingressRate": 4000000, "ingressBurst": 131072, "egressRate": 8000000, "egressBurst": 131072}}

// bandwidthDeliberate: our ifb devices carry an alias (for GC); the
// reference's redirect filter has a second mirred action that never runs
// (plugins/bandwidth/README.md).
var bandwidthDeliberate = []string{
	`ifalias=patchbay-bandwidth net-sha512=[0-9a-f]+ if=\S+ `,
	`\{"bind":1,"control_action":\{"type":"pass"\},"direction":"egress","index":\d+,"kind":"mirred","mirred_action":"redirect","order":2,"ref":1,"to_dev":"bwp[0-9a-f]+"\},`,
}

// sbrIgnore: the reference also copies an interface's gateway-less routes
// of the other family into each address's table, where no rule looks them
// up (plugins/sbr/README.md): IPv6 routes in the IPv4 address's table 100
// (firewall lines differ by design, as in every case).
const sbrIgnore = `^fw: |^route6: .* table=100$`

// The bandwidth and sbr plugins in real chains, against the reference.
func TestMetaPlugins(t *testing.T) {
	cases := []dcase{{
		// Kubelet's shape: the capability, one shaped and one unshaped pod.
		name: "bridge-bandwidth-capability",
		conf: `{"cniVersion":"1.0.0","name":"bwnet","plugins":[
		 {"type":"bridge","bridge":"bwbr","isGateway":true,"ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.61.0.0/24"}},
		 {"type":"bandwidth","capabilities":{"bandwidth":true}}]}`,
		atts:       []att{{id: "bw1", ifname: "eth0", cont: "c1", caps: bwCaps}, {id: "bw2", ifname: "eth0", cont: "c2"}},
		deliberate: bandwidthDeliberate,
	}, {
		// Kubelet's "no limit" burst at 10 Mbit/s (fits 32 bits of ticks:
		// the same tbf on both sides), config keys, dual-stack ptp.
		name: "ptp-bandwidth-keys-dualstack",
		conf: `{"cniVersion":"0.4.0","name":"bwptp","plugins":[
		 {"type":"ptp","ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","ranges":[[{"subnet":"10.62.0.0/24"}],[{"subnet":"fd00:62::/64"}]]}},
		 {"type":"bandwidth","ingressRate":10000000,"ingressBurst":2147483647,"egressRate":10000000,"egressBurst":2147483647}]}`,
		atts:       one("bw3", nil),
		deliberate: append(append([]string{}, ptpDeliberate...), bandwidthDeliberate...),
	}, {
		name: "bridge-bandwidth-ingress-only-1.1.0",
		conf: `{"cniVersion":"1.1.0","name":"bwin","plugins":[
		 {"type":"bridge","bridge":"bwbr2","ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.63.0.0/24"}},
		 {"type":"bandwidth","ingressRate":1000000,"ingressBurst":800000}]}`,
		atts: one("bw4", nil),
	}, {
		// bridge + sbr, dual-stack: the same rules, tables and routes; the
		// reference's CHECK of the chain fails, ours passes.
		name: "bridge-sbr-dualstack-1.0.0",
		conf: `{"cniVersion":"1.0.0","name":"sbrnet","plugins":[
		 {"type":"bridge","bridge":"sbrbr","isDefaultGateway":true,"ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","ranges":[[{"subnet":"10.64.0.0/24"}],[{"subnet":"fd00:64::/64"}]],"routes":[{"dst":"192.168.64.0/24"}]}},
		 {"type":"sbr"}]}`,
		atts:          one("sbr1", nil),
		ignore:        sbrIgnore,
		refCheckFails: true,
	}, {
		// At 1.1.0 our result also says which table each moved route is in.
		name: "ptp-sbr-1.1.0",
		conf: `{"cniVersion":"1.1.0","name":"sbrptp","plugins":[
		 {"type":"ptp","ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.65.0.0/24","routes":[{"dst":"0.0.0.0/0"}]}},
		 {"type":"sbr"}]}`,
		atts:          one("sbr2", nil),
		deliberate:    ptpDeliberate,
		ignore:        sbrIgnore,
		resultIgnore:  `^\s*("table": 100|"dst": "0\.0\.0\.0/0",?)$`,
		refCheckFails: true,
	}, {
		name: "bridge-sbr-table",
		conf: `{"cniVersion":"1.0.0","name":"sbrtab","plugins":[
		 {"type":"bridge","bridge":"sbrbr2","isGateway":true,"ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","subnet":"10.66.0.0/24","routes":[{"dst":"0.0.0.0/0"}]}},
		 {"type":"sbr","table":42}]}`,
		atts: one("sbr3", nil),
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { t.Parallel(); runCase(t, c) })
	}
}
