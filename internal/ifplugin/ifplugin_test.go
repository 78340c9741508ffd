package ifplugin

import (
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// Validate refuses, with code 7 naming the key and value, what no ADD can
// use, per the kind's master rule.
func TestValidate(t *testing.T) {
	vlan := &Kind{Type: "vlan", Master: MasterRequired}
	dummy := &Kind{Type: "dummy", Master: NoMaster}
	mv := &Kind{Type: "macvlan", Master: MasterOrDefaultRoute}
	for _, c := range []struct {
		k    *Kind
		c    Conf
		want []string // empty: valid
	}{
		{mv, Conf{}, nil},
		{mv, Conf{Master: "eth0", MTU: 1500}, nil},
		{vlan, Conf{}, []string{`"master"`, "required"}},
		{vlan, Conf{Master: "eth0/1"}, []string{`"master"`, "eth0/1"}},
		{vlan, Conf{Master: "averyveryverylongname"}, []string{`"master"`, "averyveryverylongname"}},
		{mv, Conf{MTU: 67}, []string{`"mtu"`, "67"}},
		{mv, Conf{MTU: 65536}, []string{`"mtu"`, "65536"}},
		{dummy, Conf{Master: "eth0"}, []string{`"master"`, "eth0"}},
		{dummy, Conf{LinkInContainer: true}, []string{`"linkInContainer"`}},
	} {
		err := c.k.Validate(c.c)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s %+v: %v", c.k.Type, c.c, err)
			}
			continue
		}
		ce, ok := err.(*spec.Error)
		if !ok || ce.Code != spec.ErrInvalidNetworkConfig {
			t.Errorf("%s %+v: %v, want code 7", c.k.Type, c.c, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(ce.Msg, w) {
				t.Errorf("%s %+v: message does not name %s: %s", c.k.Type, c.c, w, ce.Msg)
			}
		}
	}
}

func TestModes(t *testing.T) {
	ms := Modes[int]{"": 1, "a": 1, "b": 2}
	if m, err := ms.Parse("x", ""); err != nil || m != 1 {
		t.Errorf("default: %v %v", m, err)
	}
	if m, err := ms.Parse("x", "b"); err != nil || m != 2 || ms.Name(m) != "b" {
		t.Errorf("b: %v %v %s", m, err, ms.Name(m))
	}
	_, err := ms.Parse("x", "c")
	if ce, ok := err.(*spec.Error); !ok || ce.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, `"c"`) || !strings.Contains(ce.Msg, "a, b") {
		t.Errorf("unknown mode: %v", err)
	}
	if ms.Name(1) != "a" || ms.Name(9) != "mode 9" {
		t.Errorf("names: %s %s", ms.Name(1), ms.Name(9))
	}
}
