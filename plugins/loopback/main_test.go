package loopback

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// TestMain keeps the tests away from the machine's run-time state and
// fails if they leave files in its CNI directories (testutil.Main).
func TestMain(m *testing.M) { testutil.Main(m) }
