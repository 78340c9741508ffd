package portmap

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/patchbay-cni/patchbay/internal/firewall"
)

// The iptables layout (nat table, for iptables and ip6tables alike), close
// to the reference's so that operators recognise it:
//
//	PREROUTING, OUTPUT: -m addrtype --dst-type LOCAL -j PB-HOSTPORT-DNAT
//	PB-HOSTPORT-DNAT:   -m comment --comment KEY -p P -m multiport --dports ... -j PB-DN-<hash(KEY)>
//	PB-DN-<hash>:       per mapping: mark hairpin (-s subnet) and localhost
//	                    (-s 127.0.0.1, IPv4) for masquerade, then DNAT
//	PB-HOSTPORT-SETMARK: -j MARK --set-xmark BIT/BIT (or externalSetMarkChain)
//	POSTROUTING (first): -j PB-HOSTPORT-MASQ
//	PB-HOSTPORT-MASQ:   -m mark --mark BIT/BIT -j MASQUERADE
//
// The per-attachment chain is named by a hash of the key and its entry rules
// carry the key as a comment, so DEL removes exactly its own chain and
// entries, and GC can read keys back. The firewall layer writes all of one
// family in one iptables-restore, under a lock.
var (
	iptNat        = mustName("nat")
	iptDNAT       = mustName("PB-HOSTPORT-DNAT")
	iptSetMark    = mustName("PB-HOSTPORT-SETMARK")
	iptMasqChain  = mustName("PB-HOSTPORT-MASQ")
	iptPrerouting = mustName("PREROUTING")
	iptOutput     = mustName("OUTPUT")
	iptPostroute  = mustName("POSTROUTING")
)

const iptPerPfx = "PB-DN-"

func iptChain(key string) firewall.Name {
	return mustName(iptPerPfx + strings.ToUpper(shortHash(key, 16)))
}

// iptRulesets are the attachment's rules, one ruleset per family it has.
func iptRulesets(r *request) []*firewall.Ruleset {
	var out []*firewall.Ruleset
	chain := iptChain(r.Key)
	setMark := iptSetMark
	if r.ExternalMark {
		setMark = r.SetMarkChain
	}
	for _, f := range r.families() {
		v6 := f.fam == firewall.IPv6
		toLocal := []firewall.Rule{{Match: []firewall.Match{firewall.AddrType{Dst: true, Type: "LOCAL"}}, Verdict: firewall.Jump{Chain: iptDNAT}}}
		rs := &firewall.Ruleset{
			Table:  firewall.Table{Kind: firewall.IPTables, Name: iptNat, Family: f.fam},
			Owner:  firewall.Owner{Exact: r.Key},
			Search: []firewall.Name{iptDNAT},
		}
		if r.SNAT && !r.ExternalMark {
			cm, _ := firewall.NewComment("comment", "patchbay portmap masquerade mark")
			req, _ := firewall.NewComment("comment", "patchbay portmap requiring masquerade")
			rs.Shared = append(rs.Shared,
				&firewall.Chain{Name: iptSetMark, Mode: firewall.Seed, Rules: []firewall.Rule{{Comment: cm, Verdict: firewall.SetMark{Mark: r.Mark}}}},
				&firewall.Chain{Name: iptMasqChain, Mode: firewall.Seed, Rules: []firewall.Rule{{Match: []firewall.Match{firewall.MarkMatch{Mark: r.Mark}}, Verdict: firewall.Masquerade{}}}},
				// First, so that the masquerade is not pre-empted by other
				// plugins' POSTROUTING rules.
				&firewall.Chain{Name: iptPostroute, Hook: &firewall.Hook{Type: "nat", Hook: "postrouting"}, Rules: []firewall.Rule{{First: true, Comment: req, Verdict: firewall.Jump{Chain: iptMasqChain}}}},
			)
		}
		rs.Shared = append(rs.Shared,
			&firewall.Chain{Name: iptDNAT},
			&firewall.Chain{Name: iptPrerouting, Hook: &firewall.Hook{Type: "nat", Hook: "prerouting"}, Rules: toLocal},
			&firewall.Chain{Name: iptOutput, Hook: &firewall.Hook{Type: "nat", Hook: "output"}, Rules: toLocal},
		)
		own := &firewall.Chain{Name: chain}
		ports := map[firewall.Proto][]uint16{}
		for _, m := range r.Mappings {
			if !m.forFamily(v6) {
				continue
			}
			ports[m.proto()] = append(ports[m.proto()], m.HostPort)
			base := []firewall.Match{firewall.DPort{Proto: m.proto(), Port: m.HostPort}}
			if d, ok := m.daddr(); ok {
				base = append(base, firewall.Addr{Dst: true, Prefix: host(d)})
			}
			mark := func(src ...firewall.Match) {
				own.Rules = append(own.Rules, firewall.Rule{Match: append(slices.Clone(base), src...), Verdict: firewall.Jump{Chain: setMark}})
			}
			if r.SNAT {
				if r.MasqAll {
					mark()
				} else {
					mark(firewall.Addr{Prefix: netip.PrefixFrom(f.cont, f.net.Bits()).Masked()})
					if !v6 {
						mark(firewall.Addr{Prefix: host(loopback4)})
					}
				}
			}
			own.Rules = append(own.Rules, firewall.Rule{Match: base, Verdict: firewall.DNAT{To: netip.AddrPortFrom(f.cont, m.ContainerPort)}})
		}
		rs.Owned = []*firewall.Chain{own}
		protos := make([]firewall.Proto, 0, len(ports))
		for p := range ports {
			protos = append(protos, p)
		}
		slices.SortFunc(protos, func(a, b firewall.Proto) int { return strings.Compare(a.Name, b.Name) })
		for _, p := range protos {
			// multiport takes at most 15 ports per rule.
			for list := ports[p]; len(list) > 0; {
				n := min(len(list), 15)
				match := append([]firewall.Match{firewall.DPorts{Proto: p, Ports: list[:n]}}, f.conds...)
				rs.Rules = append(rs.Rules, firewall.Rule{Chain: iptDNAT, Comment: r.Comment, Match: match, Verdict: firewall.Jump{Chain: chain}})
				list = list[n:]
			}
		}
		out = append(out, rs)
	}
	return out
}

// iptSelector selects the rules of the attachments owner picks, in both
// families, with their per-attachment chains.
func iptSelector(owner firewall.Owner, chains ...firewall.Name) firewall.Selector {
	return firewall.Selector{
		Table: firewall.Table{Kind: firewall.IPTables, Name: iptNat}, Owner: owner,
		In: []firewall.Name{iptDNAT}, Chains: chains, ChainPrefix: iptPerPfx,
	}
}
