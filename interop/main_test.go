package interop

import (
	"os"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/rundir"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// TestMain keeps the tests away from the machine's run-time state (our
// locks and records in a temporary run directory, no system bus) and fails
// if they leave files in the machine's CNI directories.
func TestMain(m *testing.M) { testutil.Main(m) }

// TestMachineIsolated: what these tests run (podman passes its environment
// on to the plugins) sees a system bus that does not exist, so a firewall
// plugin left to pick its backend never finds the machine's firewalld, and
// a temporary run directory.
func TestMachineIsolated(t *testing.T) {
	if got := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); got != testutil.NoSystemBus {
		t.Errorf("DBUS_SYSTEM_BUS_ADDRESS=%q, want %q", got, testutil.NoSystemBus)
	}
	if d := rundir.Dir(); d == rundir.Default || !strings.HasPrefix(d, os.TempDir()) {
		t.Errorf("run directory %q, want a temporary one", d)
	}
}
