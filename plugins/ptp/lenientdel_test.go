package ptp

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// DEL with a configuration ADD would refuse (bad mtu, unknown
// ipMasqBackend, no ipam at all) succeeds and removes what it can: the
// runtime sends DEL after a refused ADD and retries while it fails.
func TestDelToleratesInvalidConfig(t *testing.T) {
	_, hostPath := testutil.NewNS(t, "ptph")
	cont, contPath := testutil.NewNS(t, "ptpc")
	dataDir := t.TempDir()
	good := conf(t, dataDir, false, "10.42.0.0/24")
	if out, code := run(t, hostPath, "ADD", good, "lenient", contPath); code != 0 {
		t.Fatalf("ADD: %s", out)
	}
	var m map[string]any
	json.Unmarshal([]byte(good), &m)
	m["mtu"], m["ipMasq"], m["ipMasqBackend"] = -5, true, "pf"
	bad, _ := json.Marshal(m)
	if out, code := run(t, hostPath, "DEL", string(bad), "lenient", contPath); code != 0 {
		t.Fatalf("DEL with an invalid mtu and ipMasqBackend: %s", out)
	}
	if out := in(t, cont, "ip", "-o", "link"); strings.Contains(out, "eth0") {
		t.Errorf("eth0 left: %s", out)
	}
	if files, _ := filepath.Glob(filepath.Join(dataDir, "ptpnet", "10.*")); len(files) != 0 {
		t.Errorf("allocations left: %v", files)
	}
	delete(m, "ipam")
	noIPAM, _ := json.Marshal(m)
	if out, code := run(t, hostPath, "DEL", string(noIPAM), "lenient", contPath); code != 0 {
		t.Errorf("DEL without ipam: %s", out)
	}
}
