package hostlocal

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// FuzzConfig feeds host-local's configuration handling (skel's parsing, then
// loadConfig) arbitrary configs and CNI_ARGS: a refusal is a configuration
// error naming no plugin; an accepted config has usable ranges and places
// each requested address in its own range set. `go test` runs the seeds;
// `go test -fuzz FuzzConfig ./plugins/hostlocal` explores.
func FuzzConfig(f *testing.F) {
	testutil.FuzzConfig(f, Plugin(), [][2]string{
		{testConf("/tmp/d", `"subnet":"10.1.0.0/24"`), ""},
		{testConf("/tmp/d", `"ranges":[[{"subnet":"10.5.0.0/24","rangeStart":"10.5.0.10","rangeEnd":"10.5.0.20","gateway":"10.5.0.1"}],[{"subnet":"2001:db8:5::/64"}]]`), "IP=10.5.0.11"},
		{testConf("/tmp/d", `"subnet":"10.5.0.0/24","routes":[{"dst":"0.0.0.0/0","gw":"10.5.0.1","table":100,"priority":10}]`, `"runtimeConfig":{"ips":["10.5.0.9/24"]}`), "IgnoreUnknown=1;IP=10.5.0.9"},
		{testConf("/tmp/d", `"subnet":"::ffff:10.0.0.0/120"`, `"args":{"cni":{"ips":["10.0.0.5"]}}`), ""},
		{testConf("/tmp/d", `"subnet":"10.5.0.0/31"`), ""},
		{testConf("/tmp/d", `"ranges":[[{"subnet":"10.5.0.0/24"},{"subnet":"10.5.0.0/25"}]]`), ""},
		{`{"cniVersion":"0.2.0","name":"n","ipam":{"type":"host-local","subnet":"10.0.0.0/8","resolvConf":"/etc/resolv.conf"}}`, ""},
		{`{"cniVersion":"1.1.0","name":"n","ipam":{"routes":[{"dst":"10.0.0.0/8","table":4294967396}]}}`, "IP=1.2.3.4,bogus"},
		{`{"cniVersion":"1.1.0","name":"n","ipam":{"dataDir":"a\u0000b","subnet":"10.0.0.0/24"}}`, ""},
		{`{}`, ""}, {`null`, ""},
	}, loadConfig, func(t *testing.T, c *config) {
		if len(c.Sets) == 0 {
			t.Fatal("accepted a config without range sets")
		}
		for _, set := range c.Sets {
			for i := range set {
				r := &set[i]
				if !r.Subnet.Contains(r.Start) || !r.Subnet.Contains(r.End) || r.End.Less(r.Start) {
					t.Fatalf("accepted range %s outside or reversed in %s", r, r.Subnet)
				}
			}
		}
		used := map[int]bool{}
		for _, r := range c.Requested {
			if r.Set < 0 || r.Set >= len(c.Sets) || c.Sets[r.Set].rangeFor(r.Addr) == nil || used[r.Set] {
				t.Fatalf("requested %s placed in set %d", r.Addr, r.Set)
			}
			used[r.Set] = true
		}
		for _, rt := range c.Routes {
			if err := rt.Check(); err != nil || !rt.Dst.IsValid() {
				t.Fatalf("accepted route %+v: %v", rt, err)
			}
		}
	})
}
