package bandwidth

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// Ingress 1 Mbit/s with a 100000-byte bucket; egress 2 Mbit/s, 50000 bytes.
const bothKeys = `"ingressRate":1000000,"ingressBurst":800000,"egressRate":2000000,"egressBurst":400000`

// tbfOpts is tc's view of a device's root tbf: rate (bytes/s), burst
// (bytes, from the buffer) and latency (µs, from the limit).
func (f *fixture) tbfOpts(dev string) (rate, burst, lat float64) {
	f.t.Helper()
	for _, q := range f.qdiscs(dev) {
		if q["root"] == true && q["kind"] == "tbf" {
			o := q["options"].(map[string]any)
			return o["rate"].(float64), o["burst"].(float64), o["lat"].(float64)
		}
	}
	f.t.Fatalf("%s has no root tbf: %v", dev, f.qdiscs(dev))
	return
}

// redirectTarget is the device the host veth's ingress filter redirects
// to, as tc shows it ("" when there is no such filter).
func (f *fixture) redirectTarget() (string, int) {
	f.t.Helper()
	out := f.sh(f.host, "tc filter show dev "+f.hostIf+" ingress")
	n := strings.Count(out, "Egress Redirect to device")
	if n == 0 {
		return "", 0
	}
	_, rest, _ := strings.Cut(out, "Egress Redirect to device ")
	dev, _, _ := strings.Cut(rest, ")")
	return dev, n
}

// ADD at every spec version shapes both directions with the reference's
// tbf parameters; CHECK passes; DEL removes all of it, twice.
func TestAddCheckDelEveryVersion(t *testing.T) {
	for _, v := range spec.AllVersions {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			before := f.hostState()
			cfg := conf(v, bothKeys, f.prevResult(v))
			out := f.mustRun("ADD", cfg)

			if rate, burst, lat := f.tbfOpts(f.hostIf); rate != 125000 || burst != 100000 || lat != 25000 {
				t.Errorf("ingress tbf on %s: rate %v burst %v lat %v, want 125000 100000 25000", f.hostIf, rate, burst, lat)
			}
			if !f.hasLink(f.host, f.ifb) {
				t.Fatalf("no ifb device %s", f.ifb)
			}
			l := f.linkJSON(f.host, f.ifb)
			kind, _ := l["linkinfo"].(map[string]any)["info_kind"].(string)
			if kind != "ifb" || l["mtu"].(float64) != 1500 || l["txqlen"] != nil || !strings.Contains(fmt.Sprint(l["flags"]), "UP") {
				t.Errorf("ifb %s: kind %s mtu %v txqlen %v flags %v", f.ifb, kind, l["mtu"], l["txqlen"], l["flags"])
			}
			if l["ifalias"] != ifbAlias(netName, f.contIfName) {
				t.Errorf("ifb alias %v, want %q", l["ifalias"], ifbAlias(netName, f.contIfName))
			}
			if rate, burst, lat := f.tbfOpts(f.ifb); rate != 250000 || burst != 50000 || lat != 25000 {
				t.Errorf("egress tbf on %s: rate %v burst %v lat %v, want 250000 50000 25000", f.ifb, rate, burst, lat)
			}
			if dev, n := f.redirectTarget(); dev != f.ifb || n != 1 {
				t.Errorf("%s ingress redirects %d times to %q, want once to %s", f.hostIf, n, dev, f.ifb)
			}

			res, err := spec.ParseResult([]byte(out), v)
			if err != nil {
				t.Fatalf("result: %v: %s", err, out)
			}
			if res.CNIVersion != v && !(v == "0.1.0" || v == "0.2.0") {
				t.Errorf("result version %s", res.CNIVersion)
			}
			if spec.Compare(v, spec.V030) >= 0 {
				if len(res.Interfaces) != 3 || res.Interfaces[2].Name != f.ifb || res.Interfaces[2].Mac != l["address"] || res.Interfaces[2].Sandbox != "" {
					t.Errorf("result interfaces: %s", out)
				}
			}
			if spec.VerbSupported(v, spec.CmdCheck) {
				f.mustRun("CHECK", conf(v, bothKeys, out))
			}
			f.mustRun("DEL", cfg)
			f.mustRun("DEL", cfg)
			if after := f.hostState(); after != before {
				t.Errorf("host state after DEL differs:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// CHECK compares the kernel with the configuration and names what differs.
func TestCheckFindsDifferences(t *testing.T) {
	f := newFixture(t)
	out := f.mustRun("ADD", conf("1.1.0", bothKeys, f.prevResult("1.1.0")))
	check := func() (string, int) { return f.run("CHECK", conf("1.1.0", bothKeys, out)) }
	if o, rc := check(); rc != 0 {
		t.Fatalf("CHECK after ADD: %s", o)
	}
	// Another configuration than the kernel's.
	o, rc := f.run("CHECK", conf("1.1.0", strings.Replace(bothKeys, "1000000", "1000008", 1), out))
	expectError(t, o, rc, 999, "rate", f.hostIf, "ingressRate 1000008")
	o, rc = f.run("CHECK", conf("1.1.0", `"ingressRate":1000000,"ingressBurst":800000`, out))
	expectError(t, o, rc, 999, f.ifb, "no egress shaping")

	for _, tc := range []struct {
		name, script string
		mentions     []string
	}{
		{"ingress tbf changed", "tc qdisc change dev " + f.hostIf + " root handle 1: tbf rate 1mbit burst 90000 latency 25ms", []string{f.hostIf, "buffer"}},
		{"egress tbf removed", "tc qdisc del dev " + f.ifb + " root", []string{f.ifb, "no tbf 1:"}},
		{"redirect removed", "tc filter del dev " + f.hostIf + " ingress", []string{"does not redirect", f.ifb}},
		{"ifb down", "ip link set " + f.ifb + " down", []string{f.ifb, "down"}},
		{"ifb gone", "ip link del " + f.ifb, []string{f.ifb, "not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.mustRun("ADD", conf("1.1.0", bothKeys, f.prevResult("1.1.0"))) // put it right again
			if o, rc := check(); rc != 0 {
				t.Fatalf("CHECK after re-ADD: %s", o)
			}
			f.sh(f.host, tc.script)
			o, rc := check()
			expectError(t, o, rc, 999, tc.mentions...)
		})
	}
}

// An ADD repeated for the same attachment converges to the same state
// (one filter, the new rates) instead of failing or piling up.
func TestAddTwice(t *testing.T) {
	f := newFixture(t)
	f.mustRun("ADD", conf("1.0.0", bothKeys, f.prevResult("1.0.0")))
	faster := strings.Replace(bothKeys, `"egressRate":2000000`, `"egressRate":4000000`, 1)
	out := f.mustRun("ADD", conf("1.0.0", faster, f.prevResult("1.0.0")))
	if dev, n := f.redirectTarget(); dev != f.ifb || n != 1 {
		t.Errorf("redirects %d times to %q after two ADDs", n, dev)
	}
	if rate, _, _ := f.tbfOpts(f.ifb); rate != 500000 {
		t.Errorf("egress rate %v after the second ADD, want 500000", rate)
	}
	f.mustRun("CHECK", conf("1.0.0", faster, out))
	var res struct{ Interfaces []any }
	json.Unmarshal([]byte(out), &res)
	if len(res.Interfaces) != 3 {
		t.Errorf("interfaces after the second ADD: %s", out)
	}
}

// Only ingress, only egress: the other direction is left alone.
func TestOneDirection(t *testing.T) {
	f := newFixture(t)
	in := `"ingressRate":1000000,"ingressBurst":800000`
	out := f.mustRun("ADD", conf("1.0.0", in, f.prevResult("1.0.0")))
	if f.hasLink(f.host, f.ifb) || f.hasIngressQdisc(f.hostIf) {
		t.Errorf("ingress-only ADD made egress pieces: %s", f.hostState())
	}
	f.mustRun("CHECK", conf("1.0.0", in, out))
	f.mustRun("DEL", conf("1.0.0", in, out))
	if k := f.rootKind(f.hostIf); !strings.HasPrefix(k, "noqueue") {
		t.Errorf("root qdisc after DEL: %s", k)
	}

	eg := `"egressRate":2000000,"egressBurst":400000`
	out = f.mustRun("ADD", conf("1.0.0", eg, f.prevResult("1.0.0")))
	if k := f.rootKind(f.hostIf); !strings.HasPrefix(k, "noqueue") {
		t.Errorf("egress-only ADD changed the host veth's root qdisc: %s", k)
	}
	f.mustRun("CHECK", conf("1.0.0", eg, out))
	f.mustRun("DEL", conf("1.0.0", eg, out))
	if f.hasLink(f.host, f.ifb) || f.hasIngressQdisc(f.hostIf) {
		t.Errorf("egress pieces left after DEL: %s", f.hostState())
	}
}

// The bandwidth capability (runtimeConfig) replaces the config's keys.
func TestRuntimeConfigWins(t *testing.T) {
	f := newFixture(t)
	keys := bothKeys + `,"runtimeConfig":{"bandwidth":{"ingressRate":3000000,"ingressBurst":800000}}`
	out := f.mustRun("ADD", conf("1.1.0", keys, f.prevResult("1.1.0")))
	if rate, _, _ := f.tbfOpts(f.hostIf); rate != 375000 {
		t.Errorf("ingress rate %v, want the capability's 375000 bytes/s", rate)
	}
	if f.hasLink(f.host, f.ifb) {
		t.Errorf("egress shaped although the capability sets only ingress")
	}
	f.mustRun("CHECK", conf("1.1.0", keys, out))
	f.mustRun("DEL", conf("1.1.0", keys, out))
}

// Nothing to shape: prevResult comes back unchanged and the kernel is not
// touched (the container namespace need not even exist).
func TestNothingToShape(t *testing.T) {
	f := newFixture(t)
	prev := f.prevResult("1.1.0")
	for _, keys := range []string{"", `"ingressRate":0,"egressBurst":0`, `"runtimeConfig":{"bandwidth":{}}`} {
		out, rc := f.run("ADD", conf("1.1.0", keys, prev), "CNI_NETNS=/run/netns/pbt-does-not-exist")
		if rc != 0 {
			t.Fatalf("ADD %q: %s", keys, out)
		}
		var got, want any
		json.Unmarshal([]byte(out), &got)
		json.Unmarshal([]byte(prev), &want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ADD %q result %s, want prevResult %s", keys, out, prev)
		}
	}
	// Without a prevResult too (the reference prints an empty result).
	if out, rc := f.run("ADD", conf("1.1.0", "", "")); rc != 0 {
		t.Errorf("ADD without prevResult or shaping: %s", out)
	}
}

// DEL needs no container: the ifb goes even when the namespace (and with
// it the veth pair) is gone, or when CNI_NETNS is empty.
func TestDelWithoutContainer(t *testing.T) {
	for _, netnsEnv := range []string{"gone", "empty"} {
		t.Run(netnsEnv, func(t *testing.T) {
			f := newFixture(t)
			cfg := conf("1.0.0", bothKeys, f.prevResult("1.0.0"))
			f.mustRun("ADD", cfg)
			if out, err := exec.Command("ip", "netns", "del", f.cont).CombinedOutput(); err != nil {
				t.Fatalf("delete the container namespace: %v: %s", err, out)
			}
			env := "CNI_NETNS=" + f.contPath
			if netnsEnv == "empty" {
				env = "CNI_NETNS="
			}
			f.mustRun("DEL", cfg, env)
			if f.hasLink(f.host, f.ifb) {
				t.Errorf("ifb %s left after DEL", f.ifb)
			}
			f.mustRun("DEL", cfg, env)
		})
	}
}

// DEL with the veth still there removes the shaping from it: a redirect to
// a deleted ifb would drop everything the container sends.
func TestDelLeavesVethClean(t *testing.T) {
	f := newFixture(t)
	before := f.hostState()
	cfg := conf("0.4.0", bothKeys, f.prevResult("0.4.0"))
	f.mustRun("ADD", cfg)
	// DEL without the bandwidth keys (a runtime that lost the capability
	// args): the ifb is found by name, the shaping by what it is.
	f.mustRun("DEL", conf("0.4.0", "", ""))
	if after := f.hostState(); after != before {
		t.Errorf("host state after DEL differs:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// A redirect whose ifb is already gone (a crash between the reference's
	// DEL steps, say) is removed too.
	f.mustRun("ADD", cfg)
	f.ip(f.host, "link", "del", f.ifb)
	f.mustRun("DEL", cfg)
	if after := f.hostState(); after != before {
		t.Errorf("host state after DEL of a dangling redirect differs:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
