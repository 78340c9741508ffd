package difftest

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

// Tests needing kernel features this machine lacks (ipvlan, 8021q,
// dummy, ...) run in the test VM (internal/vmtest); the others here.
func TestMain(m *testing.M) { vmtest.Main(m) }
