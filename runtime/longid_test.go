package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// Any container ID the spec allows works end to end, however long: ADD
// caches (under a bounded name), CHECK and DEL find the entry, the queries
// list it, DEL removes it. Normal IDs keep libcni's file name.
func TestLongContainerIDs(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA})
	c := e.cni()
	l := mustList(t, `{"cniVersion":"1.1.0","name":"n1","plugins":[{"type":"fa"}]}`)
	for _, n := range []int{64, 300, 5000} {
		id := "c" + strings.Repeat("x", n-1)
		rt := &RuntimeConf{ContainerID: id, NetNS: "/run/netns/x", IfName: "eth0"}
		if _, err := c.AddNetworkList(ctx, l, rt); err != nil {
			t.Fatalf("ID of %d characters: ADD: %v", n, err)
		}
		if err := c.CheckNetworkList(ctx, l, rt); err != nil {
			t.Errorf("ID of %d characters: CHECK: %v", n, err)
		}
		if cfg, err := c.GetCachedConfig("n1", rt); err != nil || cfg == nil {
			t.Errorf("ID of %d characters: GetCachedConfig: %v, %v", n, cfg, err)
		}
		atts, err := c.GetCachedAttachments("n1", id)
		if err != nil || len(atts) != 1 || atts[0].ContainerID != id {
			t.Fatalf("ID of %d characters: GetCachedAttachments: %v, %v", n, atts, err)
		}
		name := filepath.Base(atts[0].File)
		if libcni := "n1-" + id + "-eth0"; len(libcni) <= atomicfile.NameMax && name != libcni {
			t.Errorf("ID of %d characters: cache file %q, want libcni's %q", n, name, libcni)
		} else if len(libcni) > atomicfile.NameMax && (len(name) > atomicfile.NameMax || !strings.HasPrefix(name, "_")) {
			t.Errorf("ID of %d characters: cache file %q is not a bounded name", n, name)
		}
		if err := c.GCNetworkList(ctx, l, []spec.Attachment{{ContainerID: id, IfName: "eth0"}}); err != nil {
			t.Errorf("ID of %d characters: GC keeping it: %v", n, err)
		}
		if err := c.DelNetworkList(ctx, l, rt); err != nil {
			t.Errorf("ID of %d characters: DEL: %v", n, err)
		}
		if atts, _ := c.GetCachedAttachments("", ""); len(atts) != 0 {
			t.Errorf("ID of %d characters: left in the cache after DEL: %v", n, atts)
		}
		// A second DEL (a runtime retrying) succeeds too.
		if err := c.DelNetworkList(ctx, l, rt); err != nil {
			t.Errorf("ID of %d characters: second DEL: %v", n, err)
		}
	}
}

// A cache write killed between its link and its rename leaves a temporary:
// the attachment's DEL removes it, and GC sweeps those no DEL will come for.
func TestKilledCacheWriteLeavesNothingAfterDelOrGC(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA})
	c := e.cni()
	l := mustList(t, `{"cniVersion":"1.1.0","name":"n1","plugins":[{"type":"fa"}]}`)
	rt := &RuntimeConf{ContainerID: "c1", NetNS: "/run/netns/x", IfName: "eth0"}
	dir := filepath.Join(e.cache, "results")
	writeFile(t, atomicfile.TempPath(filepath.Join(dir, "n1-c1-eth0")), `{"kind":"cniCacheV1"`)
	if err := c.DelNetworkList(ctx, l, rt); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left after DEL: %v", ents)
	}
	writeFile(t, atomicfile.TempPath(filepath.Join(dir, "n1-gone-eth0")), "{")
	writeFile(t, filepath.Join(dir, ".n1-old-eth0.tmp-123456"), "{") // an older version's name
	if err := c.GCNetworkList(ctx, l, nil); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left after GC: %v", ents)
	}
}
