package dummy

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/ifplugin/iftest"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig: any configuration is refused with a specific code or
// validated, without a panic.
func FuzzConfig(f *testing.F) {
	for _, s := range iftest.Seeds("dummy") {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		a := iftest.FuzzArgs(spec.CmdAdd, stdin, "")
		if a == nil {
			return
		}
		if err := kind.Validate(conf(a)); err != nil {
			iftest.WantCode(t, err, spec.ErrInvalidNetworkConfig)
		}
	})
}
