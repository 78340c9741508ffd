package firewall

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// TestAddCheckDel: for both rule backends and every spec version with
// chaining, bridge + firewall (dual-stack) through our runtime: ADD puts
// the reference's per-address rules in place, CHECK passes and fails once
// a rule is gone, DEL (with prevResult from 0.4.0 on, from the record
// before) leaves the host's rule set byte-identical to before, and DEL
// again, and DEL without a netns, succeed.
func TestAddCheckDel(t *testing.T) {
	for _, backend := range []string{backendIPT, backendNFT} {
		for _, v := range []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
			t.Run(backend+"/"+v, func(t *testing.T) {
				n := newNode(t)
				before := n.state()
				l := n.list(bridgeFirewall(v, "fwn", "fwbr0", "10.31.0.0/24", "fd31::/64", `,"backend":"`+backend+`"`))
				res := n.mustAdd(l, "c1", nil)
				ip4, ip6 := addrOf(t, res, false), addrOf(t, res, true)
				if spec.GreaterOrEqual(v, spec.V030) && len(res.Interfaces) != 3 {
					t.Errorf("result interfaces: %+v (want bridge's three)", res.Interfaces)
				}
				wantRules(t, n, backend, ip4, ip6, true)
				rec := filepath.Join(n.dir, "fw", "fwn", "c1:eth0.json")
				if _, err := os.Stat(rec); err != nil {
					t.Errorf("record: %v", err)
				}
				if spec.GreaterOrEqual(v, spec.V040) {
					if err := n.check(l, "c1"); err != nil {
						t.Fatalf("CHECK: %v", err)
					}
					tamper(t, n, backend, ip4)
					if err := n.check(l, "c1"); err == nil {
						t.Error("CHECK passes with a rule missing")
					} else {
						t.Logf("CHECK after tampering: %v", err)
					}
				}
				n.mustDel(l, "c1")
				if after := n.state(); after != before {
					t.Fatalf("DEL left rules:\nbefore:\n%s\nafter:\n%s", before, after)
				}
				if _, err := os.Stat(rec); !os.IsNotExist(err) {
					t.Errorf("record left after DEL: %v", err)
				}
				n.mustDel(l, "c1")
				if err := n.in(func(ctx context.Context) error {
					return n.cni.DelNetworkList(ctx, l, &runtime.RuntimeConf{ContainerID: "c1", IfName: "eth0"})
				}); err != nil {
					t.Errorf("DEL without netns: %v", err)
				}
			})
		}
	}
}

// TestIPv6Only: an IPv6-only attachment gets ip6tables (or ip6 nftables)
// rules only, with an ingress policy too; CHECK passes; DEL leaves the
// rule set as before.
func TestIPv6Only(t *testing.T) {
	for _, backend := range []string{backendIPT, backendNFT} {
		t.Run(backend, func(t *testing.T) {
			n := newNode(t)
			before := n.state()
			l := n.list(bridgeFirewall("1.1.0", "fw6", "fwbr6", "", "fd48::/64", `,"backend":"`+backend+`","ingressPolicy":"same-bridge"`))
			res := n.mustAdd(l, "s1", nil)
			ip6 := addrOf(t, res, true)
			if backend == backendIPT {
				if !n.iptablesHas(true, "-A CNI-FORWARD -s "+ip6+"/128 -j ACCEPT") || !n.iptablesHas(true, "-i fwbr6 ! -o fwbr6") {
					t.Errorf("ip6tables rules missing:\n%s", n.state())
				}
				if n.iptablesHas(false, "CNI-") {
					t.Errorf("iptables (IPv4) rules for an IPv6-only attachment:\n%s", n.state())
				}
			} else if out := n.sh("nft", "list", "ruleset"); !strings.Contains(out, "ip6 saddr "+ip6+" accept") || strings.Contains(out, "ip saddr") {
				t.Errorf("nftables rules:\n%s", out)
			}
			if err := n.check(l, "s1"); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			n.mustDel(l, "s1")
			if after := n.state(); after != before {
				t.Fatalf("left:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// wantRules checks that the attachment's per-address rules are there (or
// not).
func wantRules(t *testing.T, n *node, backend, ip4, ip6 string, present bool) {
	t.Helper()
	if backend == backendNFT {
		out := n.sh("nft", "list", "ruleset")
		for _, r := range []string{"ip daddr " + ip4 + " ct state established,related accept", "ip saddr " + ip4 + " accept",
			"ip6 daddr " + ip6 + " ct state established,related accept", "ip6 saddr " + ip6 + " accept"} {
			if strings.Contains(out, r) != present {
				t.Errorf("nftables rule %q present=%v, want %v:\n%s", r, !present, present, out)
			}
		}
		return
	}
	for _, c := range []struct {
		v6   bool
		addr string
	}{{false, ip4 + "/32"}, {true, ip6 + "/128"}} {
		rules := [][]string{
			{"-A CNI-FORWARD -d " + c.addr + " -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"},
			{"-A CNI-FORWARD -s " + c.addr + " -j ACCEPT"},
		}
		if present { // the scaffolding (whose removal the callers check by the whole rule set)
			rules = append(rules, []string{"-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD"},
				[]string{"-A CNI-FORWARD -m comment --comment \"CNI firewall plugin admin overrides\" -j CNI-ADMIN"})
		}
		for _, parts := range rules {
			if n.iptablesHas(c.v6, parts...) != present {
				t.Errorf("iptables rule %q present=%v, want %v", parts, !present, present)
			}
		}
	}
}

// tamper deletes the attachment's "from the address" IPv4 rule.
func tamper(t *testing.T, n *node, backend, ip4 string) {
	t.Helper()
	if backend == backendIPT {
		n.sh("iptables", "-D", "CNI-FORWARD", "-s", ip4+"/32", "-j", "ACCEPT")
		return
	}
	out := n.sh("nft", "-a", "list", "chain", "inet", "patchbay_firewall", "CNI-FORWARD")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "ip saddr "+ip4+" accept") {
			h := l[strings.LastIndex(l, "handle ")+len("handle "):]
			n.sh("nft", "delete", "rule", "inet", "patchbay_firewall", "CNI-FORWARD", "handle", strings.TrimSpace(h))
			return
		}
	}
	t.Fatalf("no rule to tamper with:\n%s", out)
}

// run runs the plugin in-process inside the node's netns
// (testutil.RunPlugin) for container ctr1, with extra KEY=VALUE environment.
func (n *node) run(cmd string, conf any, extraEnv ...string) (string, int) {
	n.t.Helper()
	env := map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": "ctr1", "CNI_NETNS": n.container("ctr1"), "CNI_IFNAME": "eth0"}
	for _, kv := range extraEnv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return testutil.RunPlugin(n.t, Plugin(), n.path, env, string(mustJSON(n.t, conf)))
}

func prevResult(withIfaces bool) map[string]any {
	r := map[string]any{
		"cniVersion": "1.0.0",
		"ips":        []any{map[string]any{"address": "10.33.0.5/24", "gateway": "10.33.0.1", "interface": 2}, map[string]any{"address": "fd33::5/64", "interface": 2}},
	}
	if withIfaces {
		r["interfaces"] = []any{map[string]any{"name": "fwbr9"}, map[string]any{"name": "vethab12"}, map[string]any{"name": "eth0", "sandbox": "/run/netns/x"}}
	}
	return r
}

// TestResultPassthrough: ADD returns prevResult unchanged, in the
// configuration's version.
func TestResultPassthrough(t *testing.T) {
	n := newNode(t)
	before := n.state()
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		prev := prevResult(true)
		prev["cniVersion"] = v
		prev["dns"] = map[string]any{"nameservers": []any{"10.33.0.1"}}
		conf := map[string]any{"cniVersion": v, "name": "pass", "type": "firewall", "backend": "nftables", "dataDir": n.dir + "/fw", "prevResult": prev}
		out, code := n.run("ADD", conf)
		if code != 0 {
			t.Fatalf("%s: ADD: %s", v, out)
		}
		pr, err := spec.ParseResult(mustJSON(t, prev), v)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := pr.Encode(v)
		if got := strings.TrimSpace(out); got != string(want) {
			t.Errorf("%s: result\n%s\nwant\n%s", v, got, want)
		}
		if out, code := n.run("DEL", conf); code != 0 {
			t.Fatalf("%s: DEL: %s", v, out)
		}
	}
	if after := n.state(); after != before {
		t.Fatalf("left rules:\n%s", after)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBadInput: each bad key is refused with code 7 (6 for a wrong JSON
// type) naming the key, before anything is created: no rule, no record.
func TestBadInput(t *testing.T) {
	n := newNode(t)
	before := n.state()
	base := func(extra map[string]any, withIfaces bool) map[string]any {
		c := map[string]any{"cniVersion": "1.0.0", "name": "bad", "type": "firewall", "dataDir": n.dir + "/fw", "prevResult": prevResult(withIfaces)}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	cases := []struct {
		conf     map[string]any
		code     uint
		mentions string
	}{
		{base(map[string]any{"backend": "pf"}, true), 7, `"backend"`},
		{base(map[string]any{"backend": 5}, true), 6, "backend"},
		{base(map[string]any{"ingressPolicy": "closed"}, true), 7, `"ingressPolicy"`},
		{base(map[string]any{"iptablesAdminChainName": "DROP"}, true), 7, `"iptablesAdminChainName"`},
		{base(map[string]any{"iptablesAdminChainName": "-X"}, true), 7, `"iptablesAdminChainName"`},
		{base(map[string]any{"iptablesAdminChainName": "A\nB"}, true), 7, `"iptablesAdminChainName"`},
		{base(map[string]any{"iptablesAdminChainName": "CNI-FORWARD"}, true), 7, `"iptablesAdminChainName"`},
		{base(map[string]any{"iptablesAdminChainName": strings.Repeat("A", 29)}, true), 7, `"iptablesAdminChainName"`},
		{base(map[string]any{"firewalldZone": "my zone"}, true), 7, `"firewalldZone"`},
		{base(map[string]any{"firewalldZone": "zone/"}, true), 7, `"firewalldZone"`},
		{base(map[string]any{"firewalldZone": strings.Repeat("z", 18)}, true), 7, `"firewalldZone"`},
		{base(map[string]any{"dataDir": "relative/dir"}, true), 7, `"dataDir"`},
		{base(map[string]any{"ingressPolicy": "same-bridge"}, false), 7, `"ingressPolicy"`},
		{base(map[string]any{"prevResult": nil}, true), 7, `"prevResult"`},
	}
	bad := base(map[string]any{"ingressPolicy": "isolated", "backend": "nftables"}, true)
	bad["prevResult"].(map[string]any)["interfaces"].([]any)[0].(map[string]any)["name"] = "-br"
	cases = append(cases, struct {
		conf     map[string]any
		code     uint
		mentions string
	}{bad, 7, "prevResult.interfaces[0].name"})
	for i, c := range cases {
		if c.conf["prevResult"] == nil {
			delete(c.conf, "prevResult")
		}
		out, code := n.run("ADD", c.conf)
		var e spec.Error
		if code == 0 || json.Unmarshal([]byte(out), &e) != nil || e.Code != c.code || !strings.Contains(e.Msg+e.Details, c.mentions) {
			t.Errorf("case %d: want code %d mentioning %s, got %d: %s", i, c.code, c.mentions, code, out)
		}
	}
	if after := n.state(); after != before {
		t.Errorf("bad input left rules:\n%s", after)
	}
	if _, err := os.Stat(filepath.Join(n.dir, "fw")); !os.IsNotExist(err) {
		t.Errorf("bad input left a record dir: %v", err)
	}
}

// TestStatus: STATUS reports the chosen backend's availability: iptables
// and nftables here; firewalld without a system bus is code 50.
func TestStatus(t *testing.T) {
	n := newNode(t)
	for backend, want := range map[string]int{"": 0, "iptables": 0, "nftables": 0, "firewalld": 1} {
		out, code := n.run("STATUS", map[string]any{"cniVersion": "1.1.0", "name": "st", "type": "firewall", "backend": backend})
		if code != want {
			t.Errorf("backend %q: STATUS exit %d, want %d: %s", backend, code, want, out)
		}
		if want == 1 && !strings.Contains(out, `"code":50`) {
			t.Errorf("backend %q: want code 50: %s", backend, out)
		}
	}
}

// TestConcurrentSameBridge: ten containers on one bridge with
// same-bridge, added and then deleted all at once: no failure, each CHECK
// passes, and the rule set ends as it began.
func TestConcurrentSameBridge(t *testing.T) {
	for _, backend := range []string{backendIPT, backendNFT} {
		t.Run(backend, func(t *testing.T) {
			n := newNode(t)
			before := n.state()
			l := n.list(bridgeFirewall("1.0.0", "fwcc", "fwbrcc", "10.34.0.0/24", "fd34::/64", `,"backend":"`+backend+`","ingressPolicy":"same-bridge"`))
			ids := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"}
			for _, id := range ids {
				n.container(id)
			}
			run := func(f func(id string) error) {
				var wg sync.WaitGroup
				errs := make(chan error, len(ids))
				for _, id := range ids {
					wg.Add(1)
					go func() { defer wg.Done(); errs <- f(id) }()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Error(err)
					}
				}
			}
			run(func(id string) error { _, err := n.add(l, id, nil); return err })
			run(func(id string) error { return n.check(l, id) })
			run(func(id string) error { return n.del(l, id) })
			if after := n.state(); after != before {
				t.Fatalf("left rules:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestDefaultBackendWithoutIptables: no "backend", no firewalld, and no
// iptables-restore in PATH: the nftables backend is used (the reference
// fails here), and DEL finds it through the record.
func TestDefaultBackendWithoutIptables(t *testing.T) {
	n := newNode(t)
	before := n.state()
	n.container("ctr1")
	path := os.Getenv("PATH")
	t.Setenv("PATH", "/nonexistent")
	conf := map[string]any{"cniVersion": "1.1.0", "name": "noipt", "type": "firewall", "dataDir": n.dir + "/fw", "prevResult": prevResult(true)}
	out, code := n.run("ADD", conf)
	os.Setenv("PATH", path) // the checks below run nft and iptables-save
	if code != 0 {
		t.Fatalf("ADD: %s", out)
	}
	if st := n.state(); !strings.Contains(st, "table inet patchbay_firewall") || !strings.Contains(st, "ip saddr 10.33.0.5 accept") {
		t.Errorf("no nftables rules:\n%s", st)
	}
	if out, code := n.run("DEL", conf); code != 0 {
		t.Fatalf("DEL: %s", out)
	}
	if after := n.state(); after != before {
		t.Fatalf("left:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
