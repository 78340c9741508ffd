package bridge

import (
	"fmt"
	"strings"
	"testing"
)

// DEL with a configuration ADD would refuse still succeeds and removes the
// attachment (veth, IP allocation, masquerade rules): the runtime sends DEL
// after a refused ADD, and also when the config changed since ADD; the
// reference's DEL accepts these keys too.
func TestDelToleratesInvalidConfig(t *testing.T) {
	h := newHarness(t)
	for i, bad := range []map[string]any{
		{"ipMasq": true, "args": map[string]any{"cni": map[string]any{"mac": "zz:zz"}}},
		{"ipMasq": true, "hairpinMode": true, "promiscMode": true},
		{"ipMasq": true, "ipMasqBackend": "pf"},
		{"ipMasq": true, "mtu": -5},
	} {
		cont, contPath := h.container()
		id := fmt.Sprint("lenient", i)
		h.mustAdd(h.conf("1.1.0", map[string]any{"ipMasq": true}, "10.36.0.0/24"), id, contPath, "eth0")
		out, code := h.run("DEL", h.conf("1.1.0", bad, "10.36.0.0/24"), id, contPath, "eth0")
		if code != 0 {
			t.Errorf("DEL with %v: code %d: %s", bad, code, out)
			continue
		}
		if out := in(t, cont, "ip", "-o", "link"); strings.Contains(out, "eth0") {
			t.Errorf("DEL with %v left eth0: %s", bad, out)
		}
		if a := h.allocated(); len(a) != 0 {
			t.Errorf("DEL with %v left allocations %v", bad, a)
		}
		if rules := masqRules(t, h.host); len(rules) != 0 {
			t.Errorf("DEL with %v left masquerade rules %q", bad, rules)
		}
	}
}
