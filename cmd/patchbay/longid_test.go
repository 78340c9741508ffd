package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// Issue 7 item 2: a container ID the spec allows but too long for a file
// name (300 characters) works end to end with our plugins: ADD (result
// cache, host-local, tuning's saved state), CHECK, the cache listing, GC
// that keeps it, DEL (twice, as a runtime retries), and nothing is left.
func TestCLILongContainerID(t *testing.T) {
	c := newCLI(t, true)
	ctr, ctrPath := testutil.NewNS(t, "clil")
	tuningDir := filepath.Join(t.TempDir(), "tuning")
	c.write("10-longnet.conflist", fmt.Sprintf(`{"cniVersion":"1.1.0","name":"longnet","plugins":[
	  {"type":"bridge","bridge":%q,"isGateway":true,"ipam":{"type":"host-local","dataDir":%q,"subnet":"10.251.9.0/24"}},
	  {"type":"tuning","dataDir":%q,"mtu":1300,"sysctl":{"net.core.somaxconn":"600"}}]}`, c.bridge, c.dataDir, tuningDir))
	id := "c" + strings.Repeat("0123456789", 30)[:299]
	env := []string{"CNI_PATH=" + testutil.OurBin(t), "CNI_CONTAINERID=" + id}

	out := c.ok(env, "add", "longnet", ctrPath)
	if !strings.Contains(out, "10.251.9.") {
		t.Fatalf("add output %q", out)
	}
	if got, _ := testutil.InNS(t, ctr, "cat", "/proc/sys/net/core/somaxconn"); got != "600" {
		t.Errorf("somaxconn %q after ADD", got)
	}
	c.ok(env, "check", "longnet", ctrPath)
	if out := c.ok(env, "cache", "longnet"); !strings.Contains(out, id) || !strings.Contains(out, "10.251.9.") {
		t.Errorf("cache listing:\n%s", out)
	}
	c.ok(env, "gc", "longnet") // keeps every cached attachment
	c.ok(env, "check", "longnet", ctrPath)
	c.ok(env, "del", "longnet", ctrPath)
	c.ok(env, "del", "longnet", ctrPath)
	if got, _ := testutil.InNS(t, ctr, "cat", "/proc/sys/net/core/somaxconn"); got == "600" {
		t.Error("somaxconn not restored by DEL")
	}
	for _, d := range []string{filepath.Join(c.cacheDir, "results"), tuningDir} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("left in %s: %v", d, ents)
		}
	}
	if out := c.allocationsOf("longnet"); len(out) != 0 {
		t.Errorf("allocations left: %v", out)
	}
	// GC with the container's netns collects an attachment with such an ID.
	c.ok(env, "add", "longnet", ctrPath)
	c.ok(env, "gc", "longnet", ctrPath)
	if ents, _ := os.ReadDir(filepath.Join(c.cacheDir, "results")); len(ents) != 0 {
		t.Errorf("left in the cache after GC: %v", ents)
	}
	if _, err := testutil.InNS(t, ctr, "ip", "link", "show", "eth0"); err == nil {
		t.Error("eth0 survived GC")
	}
}
