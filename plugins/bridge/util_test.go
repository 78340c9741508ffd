package bridge

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

func testutilPing(t *testing.T, ns, addr string) (string, error) {
	t.Helper()
	return testutil.InNS(t, ns, "ping", "-c", "1", "-W", "2", addr)
}

func execOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// masqRules returns the comments of the rules in the masq_checks chain of
// the host netns (none when the table does not exist).
func masqRules(t *testing.T, ns string) []string {
	t.Helper()
	out, err := testutil.InNS(t, ns, "nft", "-j", "list", "chain", "inet", "cni_plugins_masquerade", "masq_checks")
	if err != nil {
		return nil
	}
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Comment string           `json:"comment"`
				Expr    []map[string]any `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("nft json: %v: %s", err, out)
	}
	var c []string
	for _, e := range doc.Nftables {
		if e.Rule != nil {
			c = append(c, e.Rule.Comment)
		}
	}
	return c
}
