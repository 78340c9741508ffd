package portmap

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// TestBadInput: each bad configuration fails with the right code and a
// message naming the field and value, and leaves no rules. It runs inside a
// test netns so that a validation bug could not touch the machine's own.
func TestBadInput(t *testing.T) {
	tp := newTopo(t, 1)
	c0 := tp.c[0]
	pm := func(h, c int, proto, hostIP string) []spec.PortMapping {
		return []spec.PortMapping{{HostPort: h, ContainerPort: c, Protocol: proto, HostIP: hostIP}}
	}
	v4only := map[string]any{"cniVersion": "1.0.0", "ips": []map[string]any{{"address": c0.ip4 + "/28"}}}
	nonSandbox := map[string]any{"cniVersion": "1.0.0",
		"interfaces": []map[string]any{{"name": "hc0"}},
		"ips":        []map[string]any{{"address": c0.ip4 + "/28", "interface": 0}}}
	good := pm(8080, 80, "", "")
	for _, tc := range []struct {
		name  string
		prev  map[string]any
		maps  []spec.PortMapping
		extra map[string]any
		code  uint
		want  string
	}{
		{"host port 0", c0.prevResult(), pm(0, 80, "", ""), nil, 7, "portMappings[0].hostPort 0 is out of range"},
		{"host port too big", c0.prevResult(), pm(70000, 80, "", ""), nil, 7, "portMappings[0].hostPort 70000 is out of range"},
		{"container port negative", c0.prevResult(), pm(8080, -1, "", ""), nil, 7, "portMappings[0].containerPort -1 is out of range"},
		{"container port too big", c0.prevResult(), pm(8080, 65536, "", ""), nil, 7, "containerPort 65536"},
		{"protocol", c0.prevResult(), pm(8080, 80, "icmp", ""), nil, 7, "portMappings[0].protocol \"icmp\" is not supported"},
		{"host IP unparsable", c0.prevResult(), pm(8080, 80, "", "300.1.1.1"), nil, 7, "portMappings[0].hostIP \"300.1.1.1\" is not an IP address"},
		{"host IP family", v4only, pm(8080, 80, "", "2001:db8::1"), nil, 7, "hostIP \"2001:db8::1\" is IPv6 but the container has no IPv6 address"},
		{"no prevResult", nil, good, nil, 7, "prevResult"},
		{"no container IP", nonSandbox, good, nil, 7, "no IP address on the container interface \"eth0\""},
		{"backend", c0.prevResult(), good, map[string]any{"backend": "ebpf"}, 7, "\"backend\" \"ebpf\" is not supported"},
		{"mark bit", c0.prevResult(), good, map[string]any{"markMasqBit": 32}, 7, "\"markMasqBit\" value 32 is out of range 0..31"},
		{"mark bit and chain", c0.prevResult(), good, map[string]any{"markMasqBit": 5, "externalSetMarkChain": "X"}, 7, "cannot both be set"},
		{"wrong backend options", c0.prevResult(), good, map[string]any{"backend": "nftables", "externalSetMarkChain": "X"}, 7, "iptables-specific options [externalSetMarkChain]"},
		{"unsupported nft condition", c0.prevResult(), good, map[string]any{"conditionsV4": []string{"tcp flags syn"}}, 7, "\"conditionsV4\" value \"tcp flags syn\" is invalid: unknown match \"tcp\""},
		{"nft condition of the wrong family", c0.prevResult(), good, map[string]any{"conditionsV4": []string{"ip6 saddr ::1"}}, 7, "other address family"},
		{"bad JSON type", c0.prevResult(), good, map[string]any{"snat": "yes"}, 6, "failed to decode portmap configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := netConf(t, tc.prev, tc.maps, tc.extra)
			out, code := runIn(t, tp.hostPath, "ADD", "ctr0", "eth0", c0.path, conf)
			if code == 0 {
				t.Fatalf("ADD succeeded: %s", out)
			}
			line, _, _ := strings.Cut(out, "\n")
			var e spec.Error
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("not an error result: %s", out)
			}
			if e.Code != tc.code || !strings.Contains(e.Msg, tc.want) {
				t.Fatalf("got code %d %q, want code %d containing %q", e.Code, e.Msg, tc.code, tc.want)
			}
		})
	}
	if rs := ruleset(t, tp.host); strings.TrimSpace(rs) != "" {
		t.Fatalf("failed ADDs left rules:\n%s", rs)
	}
}
