package firewall

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// TestGC: three attachments; two containers vanish without DEL. GC with
// the third valid removes the two's rules and records and keeps the
// third's (CHECK passes, its bridge still isolated); GC with none valid
// leaves the rule set as before. Both rule backends.
func TestGC(t *testing.T) {
	for _, backend := range []string{backendIPT, backendNFT} {
		t.Run(backend, func(t *testing.T) {
			n := newNode(t)
			before := n.state()
			l := n.list(bridgeFirewall("1.1.0", "fwgc", "fwbrgc", "10.39.0.0/24", "fd39::/64", `,"backend":"`+backend+`","ingressPolicy":"same-bridge"`))
			var addrs []string
			for _, id := range []string{"g1", "g2", "g3"} {
				res := n.mustAdd(l, id, nil)
				addrs = append(addrs, addrOf(t, res, false), addrOf(t, res, true))
			}
			// Without their result cache entries the runtime's GC runs no
			// DEL for them: only the plugin's GC cleans up.
			for _, id := range []string{"g2", "g3"} {
				n.sh("ip", "netns", "del", n.containerNames[id])
				if err := os.Remove(filepath.Join(n.dir, "cache", "results", "fwgc-"+id+"-eth0")); err != nil {
					t.Fatal(err)
				}
			}
			if err := n.gc(l, "g1"); err != nil {
				t.Fatalf("GC: %v", err)
			}
			st := n.state()
			for _, a := range addrs[2:] {
				if strings.Contains(st, a+"/") || strings.Contains(st, a+" ") {
					t.Errorf("GC left rules of %s:\n%s", a, st)
				}
			}
			if err := n.check(l, "g1"); err != nil {
				t.Errorf("CHECK of the valid attachment after GC: %v", err)
			}
			if !strings.Contains(st, `"fwbrgc"`) && !strings.Contains(st, "-o fwbrgc") {
				t.Errorf("GC removed the isolation of a bridge still in use:\n%s", st)
			}
			recs, _ := filepath.Glob(filepath.Join(n.dir, "fw", "fwgc", "*.json"))
			if len(recs) != 1 || !strings.HasSuffix(recs[0], "g1:eth0.json") {
				t.Errorf("records after GC: %v", recs)
			}
			if err := os.Remove(filepath.Join(n.dir, "cache", "results", "fwgc-g1-eth0")); err != nil {
				t.Fatal(err)
			}
			if err := n.gc(l); err != nil {
				t.Fatalf("GC of everything: %v", err)
			}
			if after := n.state(); after != before {
				t.Fatalf("left after GC:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestDelAfterLostState: the runtime lost its result cache (a crash), so
// DEL comes without prevResult: the record says what to remove. For
// nftables, DEL finds the rules by their comment even without the record.
func TestDelAfterLostState(t *testing.T) {
	for _, c := range []struct {
		backend, policy string
		noRecord        bool
	}{{backendIPT, "same-bridge", false}, {backendNFT, "isolated", false}, {backendNFT, "open", true}} {
		t.Run(c.backend+"/"+c.policy, func(t *testing.T) {
			n := newNode(t)
			before := n.state()
			l := n.list(bridgeFirewall("1.0.0", "fwlost", "fwbrlost", "10.40.0.0/24", "fd40::/64", `,"backend":"`+c.backend+`","ingressPolicy":"`+c.policy+`"`))
			n.mustAdd(l, "l1", nil)
			if err := os.RemoveAll(filepath.Join(n.dir, "cache")); err != nil {
				t.Fatal(err)
			}
			if c.noRecord {
				if err := os.RemoveAll(filepath.Join(n.dir, "fw")); err != nil {
					t.Fatal(err)
				}
			}
			n.mustDel(l, "l1")
			if after := n.state(); after != before {
				t.Fatalf("left:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestDelWithBadConfig: a DEL whose configuration no longer validates
// still removes the attachment's rules (by its record, or by prevResult's
// addresses when the record is gone) and succeeds.
func TestDelWithBadConfig(t *testing.T) {
	for _, keepRecord := range []bool{true, false} {
		n := newNode(t)
		before := n.state()
		good := bridgeFirewall("1.0.0", "fwbad", "fwbrbad", "10.41.0.0/24", "", `,"backend":"iptables"`)
		n.mustAdd(n.list(good), "b1", nil)
		if !keepRecord {
			if err := os.RemoveAll(filepath.Join(n.dir, "fw")); err != nil {
				t.Fatal(err)
			}
		}
		bad := strings.Replace(good, `"backend":"iptables"`, `"iptablesAdminChainName":"DROP","ingressPolicy":"closed"`, 1)
		n.mustDel(n.list(bad), "b1")
		if after := n.state(); after != before {
			t.Fatalf("record kept=%v: left:\nbefore:\n%s\nafter:\n%s", keepRecord, before, after)
		}
	}
}

// TestRefusedAddLeavesNothing: an nftables commit the kernel refuses (a
// chain of the plugin's name was made a base chain by someone, so the
// jump to it is invalid) fails the ADD with nothing of it left: no rule,
// no record.
func TestRefusedAddLeavesNothing(t *testing.T) {
	n := newNode(t)
	n.sh("nft", "add table inet patchbay_firewall")
	n.sh("nft", "add chain inet patchbay_firewall CNI-FORWARD { type filter hook input priority 0 ; }")
	before := n.state()
	l := n.list(bridgeFirewall("1.0.0", "fwref", "fwbrref", "10.42.0.0/24", "", `,"backend":"nftables"`))
	if _, err := n.add(l, "x1", nil); err == nil {
		t.Fatal("ADD succeeded")
	} else {
		t.Logf("ADD: %v", err)
	}
	if after := n.state(); after != before {
		t.Errorf("the refused ADD left:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if recs, _ := filepath.Glob(filepath.Join(n.dir, "fw", "*", "*")); len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
	n.del(l, "x1") // the runtime's DEL after a failed ADD (bridge's veth)
	testutil.InNS(t, n.name, "nft", "delete", "table", "inet", "patchbay_firewall")
}
