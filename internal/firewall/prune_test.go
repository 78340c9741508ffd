package firewall

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// scaffold is a ruleset shaped like the firewall plugin's: an entry chain
// jumping (first) to a shared chain, which jumps (first) to an admin chain
// and holds ownerless per-address rules, and an owned chain for contrast.
func scaffold(t *testing.T, k Kind, fam Family, addr string) (*Ruleset, Rule, Rule, []Rule) {
	t.Helper()
	a := netip.MustParseAddr(addr)
	fwd, admin := MustName("PBT-FWD"), MustName("PBT-ADMIN")
	entryName, hook := MustName("FORWARD"), &Hook{Type: "filter", Hook: "forward"}
	table := Table{Kind: IPTables, Name: MustName("filter"), Family: fam}
	if k == NFTables {
		entryName = MustName("fwd")
		table = Table{Kind: NFTables, NFTFamily: "inet", Name: MustName("pbtest_prune")}
	}
	jump := Rule{Chain: entryName, Comment: mustComment(t, "to fwd"), Verdict: Jump{Chain: fwd}, First: true}
	toAdmin := Rule{Chain: fwd, Comment: mustComment(t, "to admin"), Verdict: Jump{Chain: admin}, First: true}
	perAddr := []Rule{
		{Chain: fwd, Family: fam, Match: []Match{Addr{Dst: true, Prefix: netip.PrefixFrom(a, a.BitLen())}, CtState{States: []string{"RELATED", "ESTABLISHED"}}}, Verdict: Accept{}},
		{Chain: fwd, Family: fam, Match: []Match{Addr{Prefix: netip.PrefixFrom(a, a.BitLen())}}, Verdict: Accept{}},
	}
	rs := &Ruleset{
		Table: table,
		Owner: Owner{Exact: "unused"},
		Shared: []*Chain{
			{Name: entryName, Hook: hook, Rules: []Rule{jump}},
			{Name: fwd, Rules: append([]Rule{toAdmin}, perAddr...)},
			{Name: admin},
		},
	}
	return rs, jump, toAdmin, perAddr
}

func pruneSel(rs *Ruleset, jump, toAdmin Rule, rules []Rule) Selector {
	return Selector{Table: rs.Table, Rules: rules, DropEmptyTable: true, Prune: []Prune{
		{Chain: toAdmin.Chain, Idle: []Rule{toAdmin}, From: []Rule{jump}},
		{Chain: toAdmin.Verdict.(Jump).Chain},
		{Chain: jump.Chain, Hook: &Hook{Type: "filter", Hook: "forward"}},
	}}
}

// TestRemoveRulesAndPrune: ownerless rules are removed by value (every
// copy, both backends, both families); the scaffolding goes with the last
// of them and the rule set is as before; a foreign rule in the shared
// chain, a foreign jump into it, or a rule in the admin chain keeps what
// it needs.
func TestRemoveRulesAndPrune(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "fwpr")
	for _, tool := range []string{"iptables", "ip6tables"} {
		testutil.InNS(t, host, tool, "-A", "FORWARD", "-j", "RETURN")
		testutil.InNS(t, host, tool, "-D", "FORWARD", "-j", "RETURN")
	}
	for _, k := range []Kind{IPTables, NFTables} {
		for _, fam := range []Family{IPv4, IPv6} {
			addr1, addr2 := "10.9.0.2", "10.9.0.3"
			if fam == IPv6 {
				addr1, addr2 = "fd09::2", "fd09::3"
			}
			before := testutil.FirewallState(t, host)
			rs1, jump, toAdmin, rules1 := scaffold(t, k, fam, addr1)
			rs2, _, _, rules2 := scaffold(t, k, fam, addr2)
			do := func(f func(b Backend) error) {
				t.Helper()
				if err := netns.Do(hostPath, func() error {
					s := NewSession()
					defer s.Close()
					return f(s.Backend(k))
				}); err != nil {
					t.Fatalf("%s %s: %v", k, fam, err)
				}
			}
			do(func(b Backend) error {
				if err := b.Apply(rs1); err != nil {
					return err
				}
				if err := b.Apply(rs2); err != nil {
					return err
				}
				if err := b.Check(rs1); err != nil {
					return err
				}
				// The first address's rules go; the second's keep the rest.
				if err := b.Remove(pruneSel(rs1, jump, toAdmin, rules1)); err != nil {
					return err
				}
				if err := b.Check(rs2); err != nil {
					return err
				}
				if err := b.Check(rs1); err == nil {
					t.Errorf("%s %s: Check of the removed rules passes", k, fam)
				}
				return b.Remove(pruneSel(rs2, jump, toAdmin, rules2))
			})
			if after := testutil.FirewallState(t, host); after != before {
				t.Fatalf("%s %s: left behind:\nbefore:\n%s\nafter:\n%s", k, fam, before, after)
			}

			// Something foreign in the admin chain keeps it (and only it).
			foreign := Rule{Chain: MustName("PBT-ADMIN"), Comment: mustComment(t, "operator"), Verdict: Drop{}}
			rs1.Shared[2].Rules = []Rule{foreign}
			do(func(b Backend) error {
				if err := b.Apply(rs1); err != nil {
					return err
				}
				return b.Remove(pruneSel(rs1, jump, toAdmin, rules1))
			})
			st := testutil.FirewallState(t, host)
			if !strings.Contains(st, "PBT-ADMIN") || strings.Contains(st, "PBT-FWD") {
				t.Errorf("%s %s: want PBT-ADMIN kept and PBT-FWD gone:\n%s", k, fam, st)
			}
			// A foreign jump into the shared chain keeps it.
			rs1.Shared[2].Rules = nil
			other := &Chain{Name: MustName("PBT-OTHER"), Rules: []Rule{{Comment: mustComment(t, "someone"), Verdict: Jump{Chain: MustName("PBT-FWD")}}}}
			rs1.Owned = []*Chain{other}
			do(func(b Backend) error {
				if err := b.Apply(rs1); err != nil {
					return err
				}
				return b.Remove(pruneSel(rs1, jump, toAdmin, rules1))
			})
			st = testutil.FirewallState(t, host)
			if !strings.Contains(st, "PBT-FWD") || strings.Contains(st, addr1) {
				t.Errorf("%s %s: want PBT-FWD kept (jumped to from elsewhere) without the address rules:\n%s", k, fam, st)
			}
			// Without the foreign pieces, everything goes.
			do(func(b Backend) error {
				sel := pruneSel(rs1, jump, toAdmin, nil)
				sel.Owner, sel.Chains = Owner{Exact: "someone"}, []Name{other.Name}
				if err := b.Remove(sel); err != nil {
					return err
				}
				sel = pruneSel(rs1, jump, toAdmin, nil)
				sel.Rules = []Rule{foreign}
				return b.Remove(sel)
			})
			if after := testutil.FirewallState(t, host); after != before {
				t.Fatalf("%s %s: left behind:\nbefore:\n%s\nafter:\n%s", k, fam, before, after)
			}
		}
	}
}
