package ipvlan

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/ifplugin/iftest"
)

// FuzzConfig: the configuration and CNI_ARGS handling never panics and
// refuses bad input with a specific code (iftest.FuzzDef).
func FuzzConfig(f *testing.F) { iftest.FuzzDef(f, def) }
