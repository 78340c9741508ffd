package portmap

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// hostRules gives the host test netns rules of its own in filter and nat,
// so that a flush or an added rule would show.
func hostRules(t *testing.T, ns string) {
	t.Helper()
	for _, tool := range []string{"iptables-restore", "ip6tables-restore"} {
		src := "203.0.113.7"
		if tool == "ip6tables-restore" {
			src = "2001:db8:ff::7"
		}
		script := "*filter\n:HOSTCHAIN - [0:0]\n-A INPUT -s " + src + " -j ACCEPT\n-A HOSTCHAIN -j RETURN\nCOMMIT\n" +
			"*nat\n:EXT-MARK - [0:0]\n-A EXT-MARK -j MARK --set-xmark 0x4000/0x4000\nCOMMIT\n"
		cmd := exec.Command("ip", "netns", "exec", ns, tool, "--noflush")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", tool, err, out)
		}
	}
}

// TestInjectionRefused: configuration strings that would write further
// lines into iptables-restore's input (issue 7: one flushed the host's
// filter table, one added an INPUT DROP rule that outlived DEL), or make a
// rule mean more than its key says, are refused with code 7 naming the key
// and the value; ADD, CHECK and DEL of each leave the host netns's
// iptables, ip6tables and nftables rules byte-identical.
func TestInjectionRefused(t *testing.T) {
	tp := newTopo(t, 1)
	c0 := tp.c[0]
	hostRules(t, tp.host)
	before := testutil.FirewallState(t, tp.host)
	good := []spec.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}
	for _, tc := range []struct {
		name  string
		extra map[string]any
		key   string
		value string // a part of the value the message must show (as %q shows it)
	}{
		{"externalSetMarkChain flushes the filter table",
			map[string]any{"externalSetMarkChain": "EXT-MARK\nCOMMIT\n*filter\n-F\nCOMMIT\n*nat"},
			"externalSetMarkChain", `EXT-MARK\nCOMMIT\n*filter`},
		{"conditionsV4 token adds an INPUT DROP rule",
			map[string]any{"conditionsV4": []string{"-s", "10.0.0.0/8\nCOMMIT\n*filter\n-I", "INPUT", "-j", "DROP\nCOMMIT\n*nat\n-A", "PB-HOSTPORT-DNAT", "-s", "10.0.0.0/8"}},
			"conditionsV4[1]", `10.0.0.0/8\nCOMMIT`},
		{"conditionsV6 token adds an INPUT DROP rule",
			map[string]any{"conditionsV6": []string{"-s", "2001:db8::/32\nCOMMIT\n*filter\n-I", "INPUT", "-j", "DROP\nCOMMIT\n*nat\n-A", "PB-HOSTPORT-DNAT", "-s", "2001:db8::/32"}},
			"conditionsV6[1]", `2001:db8::/32\nCOMMIT`},
		{"conditions carry a verdict",
			map[string]any{"conditionsV4": []string{"-s", "10.0.0.0/8", "-j", "ACCEPT"}},
			"conditionsV4", `option "-j" is not supported`},
		{"conditions carry a goto",
			map[string]any{"conditionsV4": []string{"-g", "INPUT"}},
			"conditionsV4", `option "-g" is not supported`},
		{"conditions load an unknown module",
			map[string]any{"conditionsV4": []string{"-m", "comment", "--comment", "x"}},
			"conditionsV4", `match module "comment" is not supported`},
		{"conditions with a carriage return",
			map[string]any{"conditionsV4": []string{"-s 10.0.0.0/8\r"}},
			"conditionsV4[0]", `10.0.0.0/8\r`},
		{"condition value that is an option",
			map[string]any{"conditionsV4": []string{"-s", "-j", "DROP"}},
			"conditionsV4", `"-s" needs a value`},
		{"externalSetMarkChain is a target",
			map[string]any{"externalSetMarkChain": "DROP"},
			"externalSetMarkChain", `DROP`},
		{"externalSetMarkChain carries options",
			map[string]any{"externalSetMarkChain": "EXT-MARK -m comment"},
			"externalSetMarkChain", `EXT-MARK -m comment`},
		{"externalSetMarkChain too long for iptables",
			map[string]any{"externalSetMarkChain": strings.Repeat("A", 29)},
			"externalSetMarkChain", strings.Repeat("A", 29)},
		{"nftables condition with a newline",
			map[string]any{"conditionsV4": []string{"ip saddr 10.0.0.1\ncounter"}},
			"conditionsV4[0]", `ip saddr 10.0.0.1\ncounter`},
		{"nftables interface name with a quote",
			map[string]any{"conditionsV4": []string{`iifname "eth0\" drop"`}},
			"conditionsV4", `eth0`},
		{"nftables interface name with a control character",
			map[string]any{"conditionsV4": []string{"iifname eth\x010"}},
			"conditionsV4[0]", `eth\x010`},
		{"network name with a newline",
			map[string]any{"name": "net\n*filter"},
			"name", `net\n*filter`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := netConf(t, c0.prevResult(), good, tc.extra)
			for _, cmd := range []string{"ADD", "CHECK"} {
				out, code := runIn(t, tp.hostPath, cmd, "ctr0", "eth0", c0.path, conf)
				if code == 0 {
					t.Fatalf("%s succeeded: %s", cmd, out)
				}
				line, _, _ := strings.Cut(out, "\n")
				var e spec.Error
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					t.Fatalf("%s: not an error result: %s", cmd, out)
				}
				if e.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, tc.key) || !strings.Contains(e.Msg, tc.value) {
					t.Fatalf("%s: got code %d %q, want code 7 naming %q and %q", cmd, e.Code, e.Msg, tc.key, tc.value)
				}
			}
			// DEL is best effort and must succeed, without writing anything
			// (skel refuses an invalid network name for every verb, code 7).
			if out, code := runIn(t, tp.hostPath, "DEL", "ctr0", "eth0", c0.path, conf); code != 0 && tc.key != "name" {
				t.Fatalf("DEL: exit %d: %s", code, out)
			}
			if after := testutil.FirewallState(t, tp.host); after != before {
				t.Fatalf("the host's firewall changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}
