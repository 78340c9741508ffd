package bandwidth

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// TestMain keeps the tests away from the machine's run-time state (our
// locks and records in a temporary run directory, no system bus) and fails
// if they leave files in the machine's CNI directories.
func TestMain(m *testing.M) { testutil.Main(m) }
