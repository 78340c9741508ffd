package firewall

import (
	"testing"
)

// TestIngressPolicyTraffic proves ingressPolicy with real traffic, for both
// rule backends. Bridges A and B have same-bridge, I has isolated, O is
// open (dual-stack A and B):
//   - same-bridge: A's containers reach each other; B's container cannot
//     reach into A, nor A's into B; containers still reach their gateway.
//   - isolated: I's two containers cannot reach each other (the rule works
//     on bridged traffic because the host has bridge-nf-call-iptables on,
//     as the reference requires), nor A's; they reach their gateway.
//   - open bridges are not isolated from anyone: the reference's semantics
//     (Docker's): only traffic between two policy bridges is dropped.
//
// Then every attachment is deleted and the rule set is as before.
func TestIngressPolicyTraffic(t *testing.T) {
	for _, backend := range []string{backendIPT, backendNFT} {
		t.Run(backend, func(t *testing.T) {
			n := newNode(t)
			n.sh("sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1", "net.bridge.bridge-nf-call-ip6tables=1")
			before := n.state()
			b := `,"backend":"` + backend + `"`
			netA := n.list(bridgeFirewall("1.0.0", "fwa", "fwbra", "10.35.1.0/24", "fd35:1::/64", b+`,"ingressPolicy":"same-bridge"`))
			netB := n.list(bridgeFirewall("1.0.0", "fwb", "fwbrb", "10.35.2.0/24", "fd35:2::/64", b+`,"ingressPolicy":"same-bridge"`))
			netI := n.list(bridgeFirewall("1.1.0", "fwi", "fwbri", "10.35.3.0/24", "", b+`,"ingressPolicy":"isolated"`))
			netO := n.list(bridgeFirewall("0.4.0", "fwo", "fwbro", "10.35.4.0/24", "", b))
			a1, a2 := n.mustAdd(netA, "a1", nil), n.mustAdd(netA, "a2", nil)
			b1 := n.mustAdd(netB, "b1", nil)
			i1, i2 := n.mustAdd(netI, "i1", nil), n.mustAdd(netI, "i2", nil)
			o1 := n.mustAdd(netO, "o1", nil)
			type probe struct {
				from, to string
				want     bool
			}
			probes := []probe{
				{"a1", addrOf(t, a2, false), true},
				{"a2", addrOf(t, a1, true), true},
				{"a1", "10.35.1.1", true},
				{"b1", addrOf(t, a1, false), false},
				{"b1", addrOf(t, a1, true), false},
				{"a1", addrOf(t, b1, false), false},
				{"a1", addrOf(t, b1, true), false},
				{"b1", "10.35.2.1", true},
				{"i1", addrOf(t, i2, false), false},
				{"i2", addrOf(t, i1, false), false},
				{"i1", "10.35.3.1", true},
				{"i1", addrOf(t, a1, false), false},
				{"o1", addrOf(t, a1, false), true},
				{"a1", addrOf(t, o1, false), true},
			}
			for _, p := range probes {
				if got := n.ping(p.from, p.to); got != p.want {
					t.Errorf("%s: ping from %s to %s: reached=%v, want %v", backend, p.from, p.to, got, p.want)
				}
			}
			n.mustDel(netA, "a1")
			// a2 is still on A: A's isolation holds.
			if n.ping("b1", addrOf(t, a2, false)) {
				t.Errorf("%s: after a1's DEL, b1 reaches a2 on a same-bridge bridge", backend)
			}
			n.mustDel(netA, "a2")
			n.mustDel(netB, "b1")
			n.mustDel(netI, "i1")
			n.mustDel(netI, "i2")
			n.mustDel(netO, "o1")
			if after := n.state(); after != before {
				t.Fatalf("left rules:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}
