package macvlan

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/ifplugin/iftest"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig: any configuration and CNI_ARGS are either refused with a
// specific code and a message, or validated into a link description,
// without a panic. (No kernel work: the system side is the contract's.)
func FuzzConfig(f *testing.F) {
	for _, s := range iftest.Seeds("macvlan") {
		f.Add([]byte(s), "IgnoreUnknown=1;MAC=02:00:00:00:00:03")
	}
	f.Fuzz(func(t *testing.T, conf []byte, args string) {
		a := iftest.FuzzArgs(spec.CmdAdd, conf, args)
		if a == nil {
			return
		}
		c, err := load(a)
		if err != nil {
			iftest.WantCode(t, err, spec.ErrDecodingFailure, spec.ErrInvalidNetworkConfig, spec.ErrInvalidEnvironment)
			return
		}
		k := kind(c)
		if err := k.Validate(c.Conf()); err != nil {
			iftest.WantCode(t, err, spec.ErrInvalidNetworkConfig)
			return
		}
		if l := k.New(nil); l == nil || l.Type() != "macvlan" {
			t.Fatalf("New made %v", l)
		}
	})
}
