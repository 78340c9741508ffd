package bandwidth

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// GC deletes this network's ifb devices that belong to no valid
// attachment, and nothing else: not a valid attachment's, not another
// network's, not one without our alias (the reference's: it names them
// the same way, and its network cannot be told).
func TestGC(t *testing.T) {
	f := newFixture(t)
	out := f.mustRun("ADD", conf("1.1.0", bothKeys, f.prevResult("1.1.0")))
	orphan := ifbName(netName, "ctr-gone")
	f.ip(f.host, "link", "add", orphan, "type", "ifb")
	f.ip(f.host, "link", "set", orphan, "alias", ifbAlias(netName, "eth0"))
	otherNet := ifbName("othernet", "ctr-gone")
	f.ip(f.host, "link", "add", otherNet, "type", "ifb")
	f.ip(f.host, "link", "set", otherNet, "alias", ifbAlias("othernet", "eth0"))
	noAlias := ifbName(netName, "ctr-ref")
	f.ip(f.host, "link", "add", noAlias, "type", "ifb")

	gc := func(valid string) {
		t.Helper()
		cfg := `{"cniVersion":"1.1.0","name":"` + netName + `","type":"bandwidth","cni.dev/valid-attachments":` + valid + `}`
		if out, rc := testutil.RunPlugin(t, Plugin(), f.hostPath, map[string]string{"CNI_COMMAND": "GC"}, cfg); rc != 0 {
			t.Fatalf("GC: %s", out)
		}
	}
	gc(`[{"containerID":"` + f.id + `","ifname":"eth0"},{"containerID":"ctr-other","ifname":"eth0"}]`)
	for name, want := range map[string]bool{f.ifb: true, orphan: false, otherNet: true, noAlias: true} {
		if f.hasLink(f.host, name) != want {
			t.Errorf("after GC: %s present = %v, want %v", name, !want, want)
		}
	}
	f.mustRun("CHECK", conf("1.1.0", bothKeys, out))

	// The same container ID with another interface is not this one.
	gc(`[{"containerID":"` + f.id + `","ifname":"eth1"}]`)
	if f.hasLink(f.host, f.ifb) {
		t.Errorf("GC kept %s, whose attachment (eth0) is not valid", f.ifb)
	}
	// DEL afterwards still cleans the host veth (its redirect now dangles).
	before := f.hostState()
	f.mustRun("DEL", conf("1.1.0", bothKeys, out))
	if f.hasIngressQdisc(f.hostIf) || f.rootKind(f.hostIf) != "noqueue 0:" {
		t.Errorf("host veth after GC and DEL: %s (before DEL: %s)", f.hostState(), before)
	}
}
