package static

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// run invokes the plugin in-process and returns stdout and the exit code.
func run(t *testing.T, cmd, conf string, extra ...string) (string, int) {
	t.Helper()
	env := skel.Env{
		"CNI_COMMAND": cmd, "CNI_CONTAINERID": "ctr1", "CNI_NETNS": "/run/netns/none",
		"CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent",
	}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	var out, errb bytes.Buffer
	code := skel.Run(context.Background(), Plugin(), env, strings.NewReader(conf), &out, &errb)
	return out.String(), code
}

func jsonEqual(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("output is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("result mismatch\n got: %s\nwant: %s", got, want)
	}
}

func conf(version, ipam string, extra ...string) string {
	s := `{"cniVersion":"` + version + `","name":"net1","type":"bridge","ipam":` + ipam
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

// fullIPAM uses every route key the reference accepts.
const fullIPAM = `{"type":"static",
	"addresses":[{"address":"10.10.0.5/24","gateway":"10.10.0.1"},{"address":"3ffe:ffff:0:1ff::5/64","gateway":"3ffe:ffff:0:1ff::1"}],
	"routes":[
		{"dst":"0.0.0.0/0"},
		{"dst":"192.168.0.0/16","gw":"10.10.0.254","mtu":1400,"advmss":1360,"priority":100,"table":50,"scope":0},
		{"dst":"3ffe:ffff:0:2::/64","gw":"3ffe:ffff:0:1ff::1","priority":5}],
	"dns":{"nameservers":["8.8.8.8"],"domain":"example.com","search":["example.com"],"options":["ndots:2"]}}`

func TestAddVersions(t *testing.T) {
	dns := `"dns":{"nameservers":["8.8.8.8"],"domain":"example.com","search":["example.com"],"options":["ndots:2"]}`
	cases := []struct{ version, want string }{
		{"1.1.0", `{"cniVersion":"1.1.0",
			"ips":[{"address":"10.10.0.5/24","gateway":"10.10.0.1"},{"address":"3ffe:ffff:0:1ff::5/64","gateway":"3ffe:ffff:0:1ff::1"}],
			"routes":[{"dst":"0.0.0.0/0"},
				{"dst":"192.168.0.0/16","gw":"10.10.0.254","mtu":1400,"advmss":1360,"priority":100,"table":50,"scope":0},
				{"dst":"3ffe:ffff:0:2::/64","gw":"3ffe:ffff:0:1ff::1","priority":5}],` + dns + `}`},
		{"0.4.0", `{"cniVersion":"0.4.0",
			"ips":[{"version":"4","address":"10.10.0.5/24","gateway":"10.10.0.1"},{"version":"6","address":"3ffe:ffff:0:1ff::5/64","gateway":"3ffe:ffff:0:1ff::1"}],
			"routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.10.0.254"},{"dst":"3ffe:ffff:0:2::/64","gw":"3ffe:ffff:0:1ff::1"}],` + dns + `}`},
		{"0.2.0", `{"cniVersion":"0.2.0",
			"ip4":{"ip":"10.10.0.5/24","gateway":"10.10.0.1","routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.10.0.254"}]},
			"ip6":{"ip":"3ffe:ffff:0:1ff::5/64","gateway":"3ffe:ffff:0:1ff::1","routes":[{"dst":"3ffe:ffff:0:2::/64","gw":"3ffe:ffff:0:1ff::1"}]},` + dns + `}`},
	}
	for _, c := range cases {
		t.Run(c.version, func(t *testing.T) {
			out, code := run(t, "ADD", conf(c.version, fullIPAM))
			if code != 0 {
				t.Fatalf("ADD failed: %s", out)
			}
			jsonEqual(t, out, c.want)
		})
	}
}

func TestPrecedence(t *testing.T) {
	ipam := `{"type":"static","addresses":[{"address":"10.0.0.2/24"}]}`
	cases := []struct {
		name     string
		conf     string
		cniArgs  string
		wantIPs  string
		wantCode int
	}{
		{"config only", conf("1.1.0", ipam), "", `[{"address":"10.0.0.2/24"}]`, 0},
		{"CNI_ARGS IP appends, GATEWAY fills matching CNI_ARGS subnets", conf("1.1.0", ipam),
			"IP=10.0.0.3/24, 2001:db8::3/64;GATEWAY=10.0.0.1,2001:db8::1",
			`[{"address":"10.0.0.2/24"},{"address":"10.0.0.3/24","gateway":"10.0.0.1"},{"address":"2001:db8::3/64","gateway":"2001:db8::1"}]`, 0},
		{"args.cni.ips replaces", conf("1.1.0", ipam, `"args":{"cni":{"ips":["10.9.0.9/16"]}}`), "IP=10.0.0.3/24",
			`[{"address":"10.9.0.9/16"}]`, 0},
		{"runtimeConfig.ips replaces args", conf("1.1.0", ipam, `"args":{"cni":{"ips":["10.9.0.9/16"]}}`, `"runtimeConfig":{"ips":["10.8.0.8/8","2001:db8::8/64"]}`), "",
			`[{"address":"10.8.0.8/8"},{"address":"2001:db8::8/64"}]`, 0},
		{"IPv4-mapped becomes IPv4", conf("1.1.0", `{"type":"static","addresses":[{"address":"::ffff:10.0.0.7/120"}]}`), "",
			`[{"address":"10.0.0.7/24"}]`, 0},
		{"unknown CNI_ARGS ignored with IgnoreUnknown", conf("1.1.0", ipam), "IgnoreUnknown=1;K8S_POD_NAME=x",
			`[{"address":"10.0.0.2/24"}]`, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, code := run(t, "ADD", c.conf, "CNI_ARGS="+c.cniArgs)
			if code != c.wantCode {
				t.Fatalf("exit %d, want %d: %s", code, c.wantCode, out)
			}
			var r struct {
				IPs json.RawMessage `json:"ips"`
			}
			json.Unmarshal([]byte(out), &r)
			jsonEqual(t, string(r.IPs), c.wantIPs)
		})
	}
}

func TestBadInput(t *testing.T) {
	ok := `{"type":"static","addresses":[{"address":"10.0.0.2/24"}]}`
	cases := []struct {
		name    string
		conf    string
		cniArgs string
		code    uint
		mention []string
	}{
		{"no ipam", `{"cniVersion":"1.1.0","name":"n","type":"static"}`, "", 7, []string{`"ipam"`}},
		{"address without prefix", conf("1.1.0", `{"type":"static","addresses":[{"address":"10.0.0.2"}]}`), "", 7, []string{"ipam.addresses[0].address", `"10.0.0.2"`}},
		{"address garbage", conf("1.1.0", `{"type":"static","addresses":[{"address":"10.0.0.2/24"},{"address":"nope/8"}]}`), "", 7, []string{"ipam.addresses[1].address", `"nope/8"`}},
		{"address missing", conf("1.1.0", `{"type":"static","addresses":[{"gateway":"10.0.0.1"}]}`), "", 7, []string{"ipam.addresses[0].address"}},
		{"bad gateway", conf("1.1.0", `{"type":"static","addresses":[{"address":"10.0.0.2/24","gateway":"10.0.0.300"}]}`), "", 7, []string{"ipam.addresses[0].gateway", "10.0.0.300"}},
		{"gateway family", conf("1.1.0", `{"type":"static","addresses":[{"address":"10.0.0.2/24","gateway":"2001:db8::1"}]}`), "", 7, []string{"ipam.addresses[0].gateway", "2001:db8::1"}},
		{"CNI_ARGS IP", conf("1.1.0", ok), "IP=10.0.0.9", 4, []string{"CNI_ARGS IP", `"10.0.0.9"`}},
		{"CNI_ARGS GATEWAY", conf("1.1.0", ok), "GATEWAY=x.y", 4, []string{"CNI_ARGS GATEWAY", `"x.y"`}},
		{"CNI_ARGS unknown key", conf("1.1.0", ok), "FOO=bar", 2, []string{"FOO"}},
		{"runtimeConfig.ips", conf("1.1.0", ok, `"runtimeConfig":{"ips":["10.1.1.1"]}`), "", 7, []string{"runtimeConfig.ips[0]", `"10.1.1.1"`}},
		{"args.cni.ips", conf("1.1.0", ok, `"args":{"cni":{"ips":["10.1.1.1/24","zz"]}}`), "", 7, []string{"args.cni.ips[1]", `"zz"`}},
		{"route dst", conf("1.1.0", `{"type":"static","routes":[{"dst":"10.0.0.0"}]}`), "", 7, []string{"ipam.routes[0].dst", `"10.0.0.0"`}},
		{"route without dst", conf("1.1.0", `{"type":"static","routes":[{"gw":"10.0.0.1"}]}`), "", 7, []string{"ipam.routes[0].dst"}},
		{"route gw", conf("1.1.0", `{"type":"static","routes":[{"dst":"0.0.0.0/0","gw":"gw"}]}`), "", 7, []string{"ipam.routes[0].gw", `"gw"`}},
		{"route scope", conf("1.1.0", `{"type":"static","routes":[{"dst":"0.0.0.0/0","scope":300}]}`), "", 7, []string{"ipam.routes[0].scope", "300"}},
		{"two IPv4 in 0.2.0", conf("0.2.0", `{"type":"static","addresses":[{"address":"10.0.0.2/24"},{"address":"10.0.1.2/24"}]}`), "", 7, []string{"0.2.0", "IPv4"}},
		{"gateway not a string", conf("1.1.0", `{"type":"static","addresses":[{"address":"10.0.0.2/24","gateway":5}]}`), "", 6, []string{"decode"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, code := run(t, "ADD", c.conf, "CNI_ARGS="+c.cniArgs)
			if code == 0 {
				t.Fatalf("ADD succeeded: %s", out)
			}
			e, ok := spec.ParseError([]byte(out))
			if !ok {
				t.Fatalf("not an error result: %s", out)
			}
			if e.Code != c.code {
				t.Errorf("code %d, want %d: %s", e.Code, c.code, e.Msg)
			}
			for _, m := range c.mention {
				if !strings.Contains(e.Error(), m) {
					t.Errorf("message %q does not mention %s", e.Error(), m)
				}
			}
		})
	}
}

func TestOtherVerbs(t *testing.T) {
	c := conf("1.1.0", fullIPAM)
	out, code := run(t, "ADD", c)
	if code != 0 {
		t.Fatalf("ADD: %s", out)
	}
	withPrev := strings.TrimSuffix(c, "}") + `,"prevResult":` + out + "}"
	if out, code := run(t, "CHECK", withPrev); code != 0 {
		t.Errorf("CHECK with its own result failed: %s", out)
	}
	other := strings.Replace(withPrev, `"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.10.0.5/24"`, `"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.10.0.6/24"`, 1)
	if other == withPrev {
		t.Fatal("test setup: prevResult substitution did not apply")
	}
	if out, code := run(t, "CHECK", other); code == 0 || !strings.Contains(out, "10.10.0.5/24") {
		t.Errorf("CHECK with a missing address: exit %d %s", code, out)
	}
	badGW := strings.Replace(withPrev, `"gateway":"10.10.0.1"}`, `"gateway":"10.10.0.9"}`, 1)
	if out, code := run(t, "CHECK", badGW); code == 0 || !strings.Contains(out, "gateway") {
		t.Errorf("CHECK with another gateway: exit %d %s", code, out)
	}
	for _, verb := range []string{"DEL", "DEL", "STATUS"} {
		if out, code := run(t, verb, c); code != 0 || out != "" {
			t.Errorf("%s: exit %d output %q", verb, code, out)
		}
	}
	gc := strings.TrimSuffix(c, "}") + `,"cni.dev/valid-attachments":[]}`
	if out, code := run(t, "GC", gc); code != 0 {
		t.Errorf("GC: %s", out)
	}
}

// TestInteropReference runs the reference static plugin on the same inputs
// and expects the same result.
func TestInteropReference(t *testing.T) {
	ref := filepath.Join(testutil.RefBin(t), "static")
	cases := []struct{ conf, cniArgs string }{
		{conf("1.1.0", fullIPAM), ""},
		{conf("1.0.0", fullIPAM), ""},
		{conf("0.4.0", fullIPAM), ""},
		{conf("0.3.1", fullIPAM), ""},
		{conf("0.2.0", fullIPAM), ""},
		{conf("1.1.0", `{"type":"static","addresses":[{"address":"10.0.0.2/24"}]}`), "IP=10.0.0.3/24,2001:db8::3/64;GATEWAY=10.0.0.1"},
		{conf("1.1.0", `{"type":"static"}`, `"runtimeConfig":{"ips":["10.8.0.8/8"]}`, `"args":{"cni":{"ips":["10.9.0.9/16"]}}`), ""},
		{conf("0.4.0", `{"type":"static","addresses":[]}`), ""},
	}
	for i, c := range cases {
		ours, code := run(t, "ADD", c.conf, "CNI_ARGS="+c.cniArgs)
		if code != 0 {
			t.Errorf("case %d: ours failed: %s", i, ours)
			continue
		}
		cmd := exec.Command(ref)
		cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=ctr1", "CNI_NETNS=/run/netns/none", "CNI_IFNAME=eth0", "CNI_PATH=/nonexistent", "CNI_ARGS=" + c.cniArgs}
		cmd.Stdin = strings.NewReader(c.conf)
		theirs, err := cmd.Output()
		if err != nil {
			t.Errorf("case %d: reference failed: %v: %s", i, err, theirs)
			continue
		}
		jsonEqual(t, ours, normalizeRef(t, theirs))
	}
}

// normalizeRef removes two known, deliberate differences from a reference
// result: it writes an empty "dns" object where we omit it, and it leaks
// the 1.1.0 route keys (mtu, advmss, ...) into older versions, where the
// spec-upgrades table drops them.
func normalizeRef(t *testing.T, data []byte) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("reference output: %v: %s", err, data)
	}
	if d, ok := m["dns"].(map[string]any); ok && len(d) == 0 {
		delete(m, "dns")
	}
	if v, _ := m["cniVersion"].(string); v != spec.V110 {
		routes, _ := m["routes"].([]any)
		for _, r := range routes {
			for k := range r.(map[string]any) {
				if k != "dst" && k != "gw" {
					delete(r.(map[string]any), k)
				}
			}
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}
