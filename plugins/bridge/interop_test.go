package bridge

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// Our nftables ipMasq layout matches the reference's, so either plugin's
// DEL removes the other's rules for that attachment and nothing else.
func TestIPMasqInteropWithReference(t *testing.T) {
	h := newHarness(t)
	_, aPath := h.container()
	_, bPath := h.container()
	ref := filepath.Join(testutil.RefBin(t), "bridge")
	conf := h.conf("1.1.0", map[string]any{"ipMasq": true, "ipMasqBackend": "nftables"}, "10.31.0.0/24")

	h.mustAdd(conf, "ours", aPath, "eth0")
	execPlugin(t, h.hostPath, ref, h.cniPath, "ADD", conf, "theirs", bPath)
	rules := masqRules(t, h.host)
	if len(rules) != 2 || count(rules, "id: ours") != 1 || count(rules, "id: theirs") != 1 {
		t.Fatalf("rules after both ADDs: %q", rules)
	}
	// The reference DEL removes our rule, ours removes the reference's.
	execPlugin(t, h.hostPath, ref, h.cniPath, "DEL", conf, "ours", aPath)
	if rules := masqRules(t, h.host); len(rules) != 1 || count(rules, "id: theirs") != 1 {
		t.Fatalf("after reference DEL of ours: %q", rules)
	}
	h.mustDel(conf, "theirs", bPath, "eth0")
	if rules := masqRules(t, h.host); len(rules) != 0 {
		t.Fatalf("after our DEL of theirs: %q", rules)
	}
}

func TestIPMasqIPTablesBackend(t *testing.T) {
	h := newHarness(t)
	_, contPath := h.container()
	conf := h.conf("1.1.0", map[string]any{"ipMasq": true, "ipMasqBackend": "iptables"}, "10.32.0.0/24")
	h.mustAdd(conf, "ipt", contPath, "eth0")
	nat := in(t, h.host, "iptables", "-t", "nat", "-S")
	if !strings.Contains(nat, "-A POSTROUTING -s 10.32.0.2/32") || !strings.Contains(nat, "-j MASQUERADE") || !strings.Contains(nat, `id: \"ipt\"`) {
		t.Fatalf("iptables rules after ADD:\n%s", nat)
	}
	h.mustDel(conf, "ipt", contPath, "eth0")
	if nat := in(t, h.host, "iptables", "-t", "nat", "-S"); strings.Contains(nat, "CNI-") {
		t.Fatalf("iptables rules left after DEL:\n%s", nat)
	}
}

func TestStatusAndGC(t *testing.T) {
	h := newHarness(t)
	conf := h.conf("1.1.0", map[string]any{"ipMasq": true}, "10.33.0.0/24")
	if out, code := h.run("STATUS", conf, "", "", ""); code != 0 {
		t.Fatalf("STATUS: %s", out)
	}
	_, aPath := h.container()
	_, bPath := h.container()
	h.mustAdd(conf, "gca", aPath, "eth0")
	h.mustAdd(conf, "gcb", bPath, "eth0")
	// GC keeping only gcb drops gca's masquerade rule. (GC reaches IPAM too,
	// but the reference host-local used here implements no GC.)
	gc := withPrev(t, conf, `null`)
	gc = strings.Replace(gc, `"prevResult":null`, `"cni.dev/valid-attachments":[{"containerID":"gcb","ifname":"eth0"}]`, 1)
	if out, code := h.run("GC", gc, "", "", ""); code != 0 {
		t.Fatalf("GC: %s", out)
	}
	if rules := masqRules(t, h.host); len(rules) != 1 || count(rules, "id: gcb") != 1 {
		t.Errorf("rules after GC: %q", rules)
	}
	h.mustDel(conf, "gca", aPath, "eth0")
	h.mustDel(conf, "gcb", bPath, "eth0")
}
