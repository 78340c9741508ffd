package bridge

import (
	"strings"
	"testing"
)

// A bridge made by someone else (no fixed MAC, so the kernel moves its MAC
// to the lowest port MAC as ports join) works like one we create: the
// result reports the bridge's MAC as it is after the ADD, so CHECK passes,
// and router advertisements are off on it (the reference does both).
func TestPreexistingBridge(t *testing.T) {
	h := newHarness(t)
	_, contPath := h.container()
	in(t, h.host, "ip", "link", "add", "pbbr0", "type", "bridge")
	conf := h.conf("1.1.0", map[string]any{"isGateway": true}, "10.29.0.0/24")
	r, raw := h.mustAdd(conf, "pre1", contPath, "eth0")
	if out := in(t, h.host, "ip", "-o", "link", "show", "pbbr0"); !strings.Contains(out, r.Interfaces[idxBridge].Mac) {
		t.Errorf("result bridge MAC %s, bridge now: %s", r.Interfaces[idxBridge].Mac, out)
	}
	if out, code := h.run("CHECK", withPrev(t, conf, raw), "pre1", contPath, "eth0"); code != 0 {
		t.Errorf("CHECK after ADD on a pre-existing bridge: %s", out)
	}
	if out := in(t, h.host, "cat", "/proc/sys/net/ipv6/conf/pbbr0/accept_ra"); out != "0" {
		t.Errorf("accept_ra on the pre-existing bridge = %s, want 0", out)
	}
	h.mustDel(conf, "pre1", contPath, "eth0")
}
