package difftest

import (
	"os"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

// TestMain runs the VM tests in the package's VM (vmtest) and keeps every
// test away from the machine's run-time state (testutil.Run: our locks and
// records in a temporary run directory, no system bus), failing if the
// tests leave files in the machine's CNI directories.
func TestMain(m *testing.M) { os.Exit(vmtest.Wrap(func() int { return testutil.Run(m) })) }
