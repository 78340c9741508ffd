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

// CNI_IFNAME already taken in the container: ADD fails before it creates
// anything, so not even the bridge is left behind, and the existing
// interface is untouched.
func TestIfnameTakenCreatesNothing(t *testing.T) {
	h := newHarness(t)
	cont, contPath := h.container()
	in(t, cont, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
	conf := h.conf("1.1.0", map[string]any{"isGateway": true}, "10.30.0.0/24")
	out, code := h.run("ADD", conf, "taken1", contPath, "eth0")
	if code == 0 || !strings.Contains(out, `\"eth0\" already exists`) || !strings.Contains(out, `"code":4`) {
		t.Fatalf("ADD with eth0 taken: code %d: %s", code, out)
	}
	if out := in(t, h.host, "ip", "-o", "link"); strings.Contains(out, "pbbr0") || strings.Contains(out, "veth") {
		t.Errorf("host links after the failed ADD: %s", out)
	}
	if a := h.allocated(); len(a) != 0 {
		t.Errorf("addresses still allocated: %v", a)
	}
	if out := in(t, cont, "ip", "-o", "link", "show", "eth0"); !strings.Contains(out, "eth0@peer0") {
		t.Errorf("the existing eth0 changed: %s", out)
	}
}

// An ADD that fails after the bridge was made (here IPAM refuses its
// config) removes the bridge it created, and only that: a bridge that was
// there before stays.
func TestFailedAddRemovesTheBridgeItCreated(t *testing.T) {
	h := newHarness(t)
	_, contPath := h.container()
	conf := h.conf("1.1.0", map[string]any{"isGateway": true}, "10.38.0.0/33")
	if out, code := h.run("ADD", conf, "fail1", contPath, "eth0"); code == 0 {
		t.Fatalf("ADD with subnet /33 succeeded: %s", out)
	}
	if out := in(t, h.host, "ip", "-o", "link"); strings.Contains(out, "pbbr0") || strings.Contains(out, "veth") {
		t.Errorf("host links after the failed ADD: %s", out)
	}
	in(t, h.host, "ip", "link", "add", "pbbr0", "type", "bridge")
	if out, code := h.run("ADD", conf, "fail2", contPath, "eth0"); code == 0 {
		t.Fatalf("ADD with subnet /33 succeeded: %s", out)
	}
	if out := in(t, h.host, "ip", "-o", "link"); !strings.Contains(out, "pbbr0") || strings.Contains(out, "veth") {
		t.Errorf("host links after the failed ADD on an existing bridge: %s", out)
	}
}
