package vlan

import (
	"os"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/ifplugin/iftest"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
	"github.com/patchbay-cni/patchbay/spec"
)

// This machine's kernel has no 8021q: every test runs in the test VM.
func TestMain(m *testing.M) { os.Exit(vmtest.Wrap(func() int { return testutil.Run(m) })) }

func TestContractVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		iftest.Contract(t, Plugin(), iftest.Spec{
			Keys:   map[string]any{"master": "m0", "vlanId": 10},
			Master: true, MTU: true,
			Second: map[string]any{"vlanId": 11},
			Bad: []iftest.Bad{
				{Name: "vlanId-negative", Keys: map[string]any{"vlanId": -1}, Want: []string{`"vlanId"`, "-1"}},
				{Name: "vlanId-4095", Keys: map[string]any{"vlanId": 4095}, Want: []string{`"vlanId"`, "4095"}},
				{Name: "no-master", Keys: map[string]any{"master": nil}, Want: []string{`"master"`, "required"}},
			},
		})
	})
}

// The VLAN id shows in the kernel's link; CHECK notices another id; a
// second attachment with an id already in use on the master is refused
// naming it, and leaves nothing.
func TestVlanIDVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		e := iftest.New(t, Plugin())
		e.Master("m0", 0)
		cont, contPath := e.Container()
		c2, c2Path := e.Container()
		conf := e.Conf("1.1.0", map[string]any{"master": "m0", "vlanId": 0}, "10.130.0.0/24")
		_, out := e.Add(conf, "v0", contPath, "eth0")
		if l := iftest.IP(t, cont, "-d", "-o", "link", "show", "eth0"); !strings.Contains(l, "vlan protocol 802.1Q id 0 ") {
			t.Errorf("eth0: %s", l)
		}
		e.OK(spec.CmdCheck, iftest.WithPrev(t, conf, out), "v0", contPath, "eth0")
		if ce := e.Fails(spec.CmdCheck, iftest.WithPrev(t, iftest.Set(t, conf, "vlanId", 7), out), "v0", contPath, "eth0"); !strings.Contains(ce.Msg, "VLAN id is 0") {
			t.Errorf("CHECK with another id: %s", ce.Msg)
		}
		before := iftest.State(t, c2)
		ce := e.Fails(spec.CmdAdd, conf, "dup", c2Path, "eth0")
		if ce.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, `"vlanId" 0`) {
			t.Errorf("second ADD with the same id: code %d: %s", ce.Code, ce.Msg)
		}
		if iftest.State(t, c2) != before || len(e.Allocated()) != 1 {
			t.Errorf("the refused ADD left something: allocations %v", e.Allocated())
		}
		e.OK(spec.CmdDel, conf, "dup", c2Path, "eth0")
		e.OK(spec.CmdDel, conf, "v0", contPath, "eth0")
	})
}

// VLAN isolation: a and b on VLAN 10 of the two ends of one veth pair
// reach each other; c on VLAN 20 of the same wire, in the same subnet,
// reaches neither.
func TestIsolationVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		e := iftest.New(t, Plugin())
		e.Master("m0", 0) // and its peer m0p
		a, aPath := e.Container()
		_, bPath := e.Container()
		c, cPath := e.Container()
		vlan := func(master string, id int) string {
			return e.Conf("1.1.0", map[string]any{"master": master, "vlanId": id}, "10.131.0.0/24", "fd00:131::/64")
		}
		e.Add(vlan("m0", 10), "a", aPath, "eth0")  // .2
		e.Add(vlan("m0p", 10), "b", bPath, "eth0") // .3
		e.Add(vlan("m0p", 20), "c", cPath, "eth0") // .4
		for _, dst := range []string{"10.131.0.3", "fd00:131::3"} {
			if !iftest.Ping(t, a, dst, 3) {
				t.Errorf("a cannot reach b (%s) on VLAN 10", dst)
			}
		}
		for _, dst := range []string{"10.131.0.2", "10.131.0.3", "fd00:131::2"} {
			if iftest.Ping(t, c, dst, 1) {
				t.Errorf("c on VLAN 20 reaches %s on VLAN 10", dst)
			}
		}
		e.OK(spec.CmdDel, vlan("m0", 10), "a", aPath, "eth0")
		e.OK(spec.CmdDel, vlan("m0p", 10), "b", bPath, "eth0")
		e.OK(spec.CmdDel, vlan("m0p", 20), "c", cPath, "eth0")
	})
}
