package difftest

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

func TestMain(m *testing.M) { vmtest.Main(m) }
