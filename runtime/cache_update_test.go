package runtime

import (
	"net/netip"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

func TestUpdateCachedResultKeepsTheEntry(t *testing.T) {
	c := &CNI{CacheDir: t.TempDir()}
	list, err := spec.ParseConfList([]byte(`{"cniVersion":"1.1.0","name":"upd","plugins":[{"type":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rt := &RuntimeConf{ContainerID: "c1", NetNS: "/run/netns/u", IfName: "eth0", Args: [][2]string{{"K", "V"}},
		CapabilityArgs: map[string]any{"mac": "0a:00:00:00:00:01"}}
	if err := c.UpdateCachedResult(list, rt, &spec.Result{}); err == nil {
		t.Fatal("updating a missing entry succeeded")
	}
	first := &spec.Result{IPs: []*spec.IPConfig{{Address: netip.MustParsePrefix("10.9.0.2/24")}},
		Routes: []*spec.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0")}}}
	if err := c.writeEntry(list, rt, first); err != nil {
		t.Fatal(err)
	}
	second := first.Clone()
	second.Routes = nil
	// The caller's RuntimeConf may carry less than ADD had: the entry keeps ADD's.
	if err := c.UpdateCachedResult(list, &RuntimeConf{ContainerID: "c1", IfName: "eth0"}, second); err != nil {
		t.Fatal(err)
	}
	a, err := c.lookup("upd", "c1", "eth0")
	if err != nil || a == nil {
		t.Fatalf("lookup: %v %v", a, err)
	}
	if len(a.Result.Routes) != 0 || len(a.Result.IPs) != 1 {
		t.Errorf("result not replaced: %v", a.Result)
	}
	if a.NetNS != "/run/netns/u" || len(a.CNIArgs) != 1 || a.CapabilityArgs["mac"] != "0a:00:00:00:00:01" {
		t.Errorf("ADD's fields lost: %+v", a)
	}
}
