package ptp

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// CNI_IFNAME already taken in the container: ADD fails before it changes
// anything (no address allocated, forwarding untouched, no veth).
func TestIfnameTakenChangesNothing(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "ptph")
	cont, contPath := testutil.NewNS(t, "ptpc")
	in(t, cont, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
	dataDir := t.TempDir()
	out, code := run(t, hostPath, "ADD", conf(t, dataDir, false, "10.41.0.0/24"), "taken1", contPath)
	if code == 0 || !strings.Contains(out, `\"eth0\" already exists`) || !strings.Contains(out, `"code":4`) {
		t.Fatalf("ADD with eth0 taken: code %d: %s", code, out)
	}
	if fwd := in(t, host, "cat", "/proc/sys/net/ipv4/ip_forward"); fwd != "0" {
		t.Errorf("ip_forward = %s after the failed ADD", fwd)
	}
	if out := in(t, host, "ip", "-o", "link"); strings.Contains(out, "veth") {
		t.Errorf("host links after the failed ADD: %s", out)
	}
	if m, _ := filepath.Glob(filepath.Join(dataDir, "ptpnet", "10.*")); len(m) != 0 {
		t.Errorf("addresses still allocated: %v", m)
	}
}
