package firewall

import (
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

func mustIf(t *testing.T, s string, wild byte) IfName {
	t.Helper()
	n, err := ParseIfName("if", s, wild)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustComment(t *testing.T, s string) Comment {
	t.Helper()
	c, err := NewComment("comment", s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// everyMatch is a rule set that uses every match and verdict of the
// family, with a comment full of characters that need quoting.
func everyMatch(t *testing.T, k Kind, fam Family, owner string) *Ruleset {
	t.Helper()
	a, p, lo, hi := netip.MustParseAddr("192.0.2.7"), netip.MustParsePrefix("198.51.100.0/24"), netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.9")
	if fam == IPv6 {
		a, p, lo, hi = netip.MustParseAddr("2001:db8::7"), netip.MustParsePrefix("2001:db8:1::/48"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::9")
	}
	cm := mustComment(t, owner+` a "quoted" it's \ x`)
	shared, own, other := MustName("PBTEST-SHARED"), MustName("PBTEST-OWN"), MustName("PBTEST-OTHER")
	mark := Mark{Value: 0x10, Mask: 0xf0}
	rs := &Ruleset{
		Owner: Owner{Prefix: owner},
		Shared: []*Chain{
			{Name: other},
			{Name: shared, Mode: Exactly, Rules: []Rule{{Family: fam, Match: []Match{Addr{Dst: true, Prefix: p}}, Verdict: Return{}}, {Verdict: Goto{Chain: other}}}},
		},
		Owned: []*Chain{{Name: own, Rules: []Rule{
			{Family: fam, Comment: cm, Match: []Match{DPort{Proto: TCP, Port: 8080}, Addr{Prefix: p, Not: true}}, Verdict: SetMark{Mark: mark}},
			{Family: fam, Match: []Match{DPort{Proto: UDP, Port: 53}}, Verdict: DNAT{To: netip.AddrPortFrom(a, 5353)}},
			{Family: fam, Match: []Match{CtDNAT{}, MarkMatch{Mark: mark, Not: true}}, Verdict: Masquerade{}},
		}}},
		Rules: []Rule{
			{Chain: other, Family: fam, Comment: cm, Match: []Match{
				Addr{Prefix: netip.PrefixFrom(a, a.BitLen())}, Iface{Name: mustIf(t, "veth", '+')}, Iface{Out: true, Name: mustIf(t, "eth0", 0), Not: true},
				AddrType{Dst: true, Type: "LOCAL"}, AddrRange{From: lo, To: hi, Not: true}, CtState{States: []string{"NEW", "RELATED"}},
			}, Verdict: Jump{Chain: own}},
			{Chain: other, Family: fam, Comment: cm, Match: []Match{L4{Proto: SCTP}}, Verdict: Accept{}},
		},
	}
	if k == IPTables {
		rs.Table = Table{Kind: IPTables, Name: MustName("nat"), Family: fam}
		rs.Rules = append(rs.Rules, Rule{Chain: other, Family: fam, Comment: cm, Match: []Match{DPorts{Proto: TCP, Ports: []uint16{1, 2, 3}}}, Verdict: Return{}}) // nat refuses DROP
	} else {
		rs.Table = Table{Kind: NFTables, NFTFamily: "inet", Name: MustName("pbtest")}
		// A nat base chain leads to the others, so the kernel validates
		// their expressions for its hook: prerouting allows DNAT, not
		// masquerade.
		rs.Shared = append(rs.Shared, &Chain{Name: MustName("pre"), Hook: &Hook{Type: "nat", Hook: "prerouting", Priority: -100}, Mode: Exactly,
			Rules: []Rule{{Verdict: Jump{Chain: shared}}}})
		rs.Owned[0].Rules[2].Verdict = Accept{}
		rs.Rules = append(rs.Rules, Rule{Chain: other, Family: fam, Comment: cm, Verdict: Drop{}})
	}
	return rs
}

// TestBackendsRoundTrip: a ruleset with every match and verdict, in both
// families and both backends, is applied; CHECK of it passes (so what the
// kernel and iptables-save give back compares equal to what we render); a
// second Apply finds nothing to write; Remove leaves the rule sets as they
// were (the shared chains, which are not the owner's, excepted).
func TestBackendsRoundTrip(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "fwrt")
	// iptables-nft creates built-in chains on first use; touch them so the
	// final comparison sees rules only.
	for _, tool := range []string{"iptables", "ip6tables"} {
		for _, c := range []string{"PREROUTING", "POSTROUTING"} {
			testutil.InNS(t, host, tool, "-t", "nat", "-A", c, "-j", "RETURN")
			testutil.InNS(t, host, tool, "-t", "nat", "-D", c, "-j", "RETURN")
		}
	}
	for _, k := range []Kind{IPTables, NFTables} {
		for _, fam := range []Family{IPv4, IPv6} {
			before := testutil.FirewallState(t, host)
			rs := everyMatch(t, k, fam, "owner1")
			err := netns.Do(hostPath, func() error {
				s := NewSession()
				defer s.Close()
				b := s.Backend(k)
				if err := b.Apply(rs); err != nil {
					t.Fatalf("%s %s: Apply: %v", k, fam, err)
				}
				if err := b.Check(rs); err != nil {
					t.Fatalf("%s %s: Check after Apply: %v\n%s", k, fam, err, testutil.FirewallState(t, host))
				}
				if n := pending(t, s, k, rs); n != 0 {
					t.Fatalf("%s %s: a second Apply would write %d things", k, fam, n)
				}
				if err := b.Apply(rs); err != nil {
					t.Fatalf("%s %s: second Apply: %v", k, fam, err)
				}
				// Another owner's rules are left alone by Remove.
				rs2 := everyMatch(t, k, fam, "owner2")
				if err := b.Apply(rs2); err != nil {
					t.Fatalf("%s %s: Apply of a second owner: %v", k, fam, err)
				}
				sel := Selector{Table: rs.Table, Owner: rs.Owner, Chains: []Name{MustName("PBTEST-OWN")}}
				if err := b.Remove(sel); err != nil {
					t.Fatalf("%s %s: Remove: %v", k, fam, err)
				}
				if err := b.Check(rs); err == nil {
					t.Fatalf("%s %s: Check passes after Remove", k, fam)
				}
				if err := b.Remove(sel); err != nil { // twice: nothing to do
					t.Fatalf("%s %s: second Remove: %v", k, fam, err)
				}
				if err := b.Remove(Selector{Table: rs.Table, Owner: rs2.Owner}); err != nil {
					t.Fatalf("%s %s: Remove of the second owner: %v", k, fam, err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// What is left is the shared chains: drop them to compare.
			if k == IPTables {
				tool := "iptables"
				if fam == IPv6 {
					tool = "ip6tables"
				}
				for _, args := range [][]string{{"-F", "PBTEST-SHARED"}, {"-F", "PBTEST-OTHER"}, {"-X", "PBTEST-SHARED"}, {"-X", "PBTEST-OTHER"}} {
					if out, err := testutil.InNS(t, host, append([]string{tool, "-t", "nat"}, args...)...); err != nil {
						t.Fatalf("%v: %v: %s", args, err, out)
					}
				}
			} else {
				if out, err := testutil.InNS(t, host, "nft", "delete", "table", "inet", "pbtest"); err != nil {
					t.Fatalf("nft delete table: %v: %s", err, out)
				}
			}
			if after := testutil.FirewallState(t, host); after != before {
				t.Fatalf("%s %s: left behind:\nbefore:\n%s\nafter:\n%s", k, fam, before, after)
			}
		}
	}
}

// pending is how many changes an Apply of rs would make now.
func pending(t *testing.T, s *Session, k Kind, rs *Ruleset) int {
	t.Helper()
	if k == IPTables {
		st, err := iptSave(rs.Table.Family, rs.Table.Name.s)
		if err != nil {
			t.Fatal(err)
		}
		fwd, _, err := planIPT(st, rs)
		if err != nil {
			t.Fatal(err)
		}
		return len(fwd.decl) + len(fwd.lines)
	}
	c, err := s.conn()
	if err != nil {
		t.Fatal(err)
	}
	tx := newTx(s, c)
	if err := tx.plan(rs); err != nil {
		t.Fatal(err)
	}
	n := tx.msgs
	if n > 0 {
		s.Close() // drop the queued messages
	}
	return n
}

// TestConcurrentApply: owners applying and removing their rules at once in
// one table all succeed (the retry policy absorbs the races) and each
// finds exactly its own rules.
func TestConcurrentApply(t *testing.T) {
	_, hostPath := testutil.NewNS(t, "fwcc")
	for _, k := range []Kind{NFTables, IPTables} {
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- netns.Do(hostPath, func() error {
					owner := "own" + string(rune('a'+i))
					rs := everyMatch(t, k, IPv4, owner)
					rs.Owned[0].Name = MustName("PBTEST-OWN-" + owner)
					rs.Rules[0].Verdict = Jump{Chain: rs.Owned[0].Name}
					s := NewSession()
					defer s.Close()
					b := s.Backend(k)
					if err := b.Apply(rs); err != nil {
						return err
					}
					if err := b.Check(rs); err != nil {
						return err
					}
					return b.Remove(Selector{Table: rs.Table, Owner: rs.Owner, Chains: chains(rs.Owned[:1]).names()})
				})
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("%s: %v", k, err)
			}
		}
	}
}

type chains []*Chain

func (c chains) names() []Name {
	var out []Name
	for _, ch := range c {
		out = append(out, ch.Name)
	}
	return out
}

func TestValues(t *testing.T) {
	for _, bad := range []string{"", "a b", "a\nb", `a"b`, strings.Repeat("x", 256), "é"} {
		if _, err := ParseName("k", bad); err == nil {
			t.Errorf("ParseName(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "-X", "!X", "A B", "A\nB", strings.Repeat("A", 29), "DROP", "accept", "POSTROUTING", "a/b"} {
		if _, err := ParseChain("k", bad); err == nil {
			t.Errorf("ParseChain(%q) accepted", bad)
		}
	}
	for _, good := range []string{"KUBE-MARK-MASQ", "CNI_x.1", strings.Repeat("A", 28)} {
		if n, err := ParseChain("k", good); err != nil || !n.IPT() {
			t.Errorf("ParseChain(%q): %v", good, err)
		}
	}
	for _, bad := range []string{"", "a\tb", "a\x7f", strings.Repeat("c", 254), "ünï"} {
		if _, err := NewComment("k", bad); err == nil {
			t.Errorf("NewComment(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "!", "-x", "a b", "a/b", "a:b", "0123456789abcdef", "+"} {
		if _, err := ParseIfName("k", bad, '+'); err == nil {
			t.Errorf("ParseIfName(%q) accepted", bad)
		}
	}
	if _, err := MarkBit("markMasqBit", 32); err == nil {
		t.Error("MarkBit(32) accepted")
	}
	if m, err := MarkBit("markMasqBit", 13); err != nil || m.String() != "0x2000/0x2000" {
		t.Errorf("MarkBit(13) = %v, %v", m, err)
	}
	if _, err := ParseKind("ipMasqBackend", "pf", NFTables); err == nil {
		t.Error("ParseKind(pf) accepted")
	}
}

func TestSplitRuleAndCanon(t *testing.T) {
	line := `-A PB-HOSTPORT-DNAT -s 10.0.0.2/32 -p tcp -m comment --comment "net \"c\" it\'s \\ x" -m multiport --dports 80 -j PB-DN-X`
	toks := splitRule(line)
	r := &iptRule{chain: toks[1], spec: toks[2:]}
	if r.comment() != `net "c" it's \ x` || r.target() != "PB-DN-X" {
		t.Fatalf("got %q", toks)
	}
	// The same rule as we would write it compares equal.
	ours := []string{"-m", "comment", "--comment", `net "c" it's \ x`, "-p", "tcp", "-m", "multiport", "--dports", "80", "-s", "10.0.0.2", "-j", "PB-DN-X"}
	if iptCanon(r.spec) != iptCanon(ours) {
		t.Fatalf("canonical forms differ:\n%q\n%q", iptCanon(r.spec), iptCanon(ours))
	}
	if iptCanon([]string{"!", "-s", "10.0.0.0/8"}) == iptCanon([]string{"-s", "10.0.0.0/8"}) {
		t.Fatal("negation is lost")
	}
}

// TestFeaturesIdempotent: the masquerade (both backends) and MAC spoof
// check features write nothing when applied again, and their teardown
// leaves none of their rules.
func TestFeaturesIdempotent(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "fwft")
	ips := []netip.Prefix{netip.MustParsePrefix("10.1.0.2/24"), netip.MustParsePrefix("fd00:1::2/64")}
	// A usual container ID, and one of 300 characters (the spec sets no
	// limit; names and comments are then shortened with a hash).
	for _, cid := range []string{"ctr1", strings.Repeat("c", 299) + "1"} {
		featuresIdempotent(t, host, hostPath, Attachment{Network: "net1", IfName: "eth0", ContainerID: cid}, ips)
	}
}

func featuresIdempotent(t *testing.T, host, hostPath string, att Attachment, ips []netip.Prefix) {
	id := att.ContainerID + "-eth0"
	err := netns.Do(hostPath, func() error {
		s := NewSession()
		defer s.Close()
		for i := 0; i < 2; i++ {
			if err := s.SetupSpoofCheck("veth1234", "0a:58:0a:01:00:02", id); err != nil {
				t.Fatal(err)
			}
			for _, k := range []Kind{NFTables, IPTables} {
				if err := s.SetupMasquerade(k, ips, att); err != nil {
					t.Fatal(err)
				}
			}
		}
		nft, err := masqNFT(ips, att)
		if err != nil {
			t.Fatal(err)
		}
		if n := pending(t, s, NFTables, nft); n != 0 {
			t.Errorf("masquerade (nftables) applied again would write %d things", n)
		}
		ipt, err := masqIPT(ips, att)
		if err != nil {
			t.Fatal(err)
		}
		for _, rs := range ipt {
			if n := pending(t, s, IPTables, rs); n != 0 {
				t.Errorf("masquerade (iptables %s) applied again would write %d things", rs.Table.Family, n)
			}
		}
		spoof, err := spoofRuleset("veth1234", "0a:58:0a:01:00:02", id)
		if err != nil {
			t.Fatal(err)
		}
		if n := pending(t, s, NFTables, spoof); n != 0 {
			t.Errorf("macspoofchk applied again would write %d things", n)
		}
		if err := s.TeardownSpoofCheck(id); err != nil {
			t.Fatal(err)
		}
		return s.TeardownMasquerade(IPTables, ips, att)
	})
	if err != nil {
		t.Fatal(err)
	}
	st := testutil.FirewallState(t, host)
	for _, gone := range []string{"cni-br-iface", "macspoofchk", "masquerade comment", "CNI-", "ctr1", "ccc"} {
		if strings.Contains(st, gone) {
			t.Errorf("%q left after teardown:\n%s", gone, st)
		}
	}
}
