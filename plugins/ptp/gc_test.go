package ptp

import (
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// GC (1.1.0) removes the masquerade rules of attachments not in the valid
// list and passes GC on to IPAM, as bridge does; ptp had no GC at all.
func TestGCRemovesStaleMasquerade(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "ptph")
	_, aPath := testutil.NewNS(t, "ptpc")
	_, bPath := testutil.NewNS(t, "ptpc")
	c := conf(t, t.TempDir(), true, "10.43.0.0/24")
	for id, p := range map[string]string{"gca": aPath, "gcb": bPath} {
		if out, code := run(t, hostPath, "ADD", c, id, p); code != 0 {
			t.Fatalf("ADD %s: %s", id, out)
		}
	}
	gcConf := strings.Replace(c, `"cniVersion"`, `"cni.dev/valid-attachments":[{"containerID":"gcb","ifname":"eth0"}],"cniVersion"`, 1)
	if out, code := run(t, hostPath, "GC", gcConf, "", ""); code != 0 {
		t.Fatalf("GC: %s", out)
	}
	rules := in(t, host, "nft", "list", "ruleset")
	if strings.Contains(rules, "id: gca") || !strings.Contains(rules, "id: gcb") {
		t.Errorf("masquerade rules after GC keeping only gcb:\n%s", rules)
	}
}
