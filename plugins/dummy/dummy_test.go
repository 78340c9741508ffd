package dummy

import (
	"os"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/ifplugin/iftest"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
	"github.com/patchbay-cni/patchbay/spec"
)

// This machine's kernel has no dummy links: every test runs in the VM.
func TestMain(m *testing.M) { os.Exit(vmtest.Wrap(func() int { return testutil.Run(m) })) }

func TestContractVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) { iftest.Contract(t, Plugin(), iftest.Spec{}) })
}

// The reference dummy reads no "mtu" or "master": neither does this one
// (they are ignored, not applied).
func TestIgnoresOtherKeysVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		e := iftest.New(t, Plugin())
		cont, contPath := e.Container()
		conf := e.Conf("1.1.0", map[string]any{"mtu": 1300, "master": "m0"}, "10.140.0.0/24")
		_, out := e.Add(conf, "d", contPath, "eth0")
		if l := iftest.IP(t, cont, "-d", "-o", "link", "show", "eth0"); !strings.Contains(l, "mtu 1500") || !strings.Contains(l, " dummy ") {
			t.Errorf("eth0: %s", l)
		}
		e.OK(spec.CmdCheck, iftest.WithPrev(t, conf, out), "d", contPath, "eth0")
		e.OK(spec.CmdDel, conf, "d", contPath, "eth0")
	})
}
