package portmap

import (
	"net/netip"

	"github.com/patchbay-cni/patchbay/internal/firewall"
)

// The nftables layout: one inet table shared by every attachment.
//
//	table inet patchbay_portmap
//	  chain prerouting  (nat, prerouting, dstnat): fib daddr type local jump hostports
//	  chain output      (nat, output, dstnat):     fib daddr type local jump hostports
//	  chain hostports:   one DNAT rule per mapping and family, commented with the key
//	  chain masquerade  (nat, postrouting, srcnat), per attachment, commented with the key:
//	    ip saddr <container subnet> ip daddr <container> ct status dnat masquerade
//	      (hairpin, and peers on its subnet, which it would otherwise answer directly)
//	    ip saddr 127.0.0.1 ip daddr <container> masquerade   (IPv4 only)
//	    with masqAll instead: ip daddr <container> ct status dnat masquerade
//
// markMasqBit is not used by this backend: masquerading is decided in
// postrouting from addresses and conntrack state, as in the reference's
// nftables backend. Conditions (conditionsV4/V6) are added to each DNAT
// rule of the attachment rather than to the shared entry rules, so that
// networks with different conditions do not overwrite each other's.
//
// Why comments rather than per-attachment chains or set elements: a rule
// comment carries the full key (network, containerID, ifname), so DEL and
// GC find exactly their rules with one dump per shared chain and delete them
// by handle in one atomic batch; nothing else (another container with the
// same IP, another network) is touched. A map keyed by port could not say
// which attachment owns an element. Rules are matched in order, so with two
// attachments claiming the same host port the older one wins until it is
// deleted.
var (
	nftTable     = firewall.Table{Kind: firewall.NFTables, NFTFamily: "inet", Name: mustName("patchbay_portmap")}
	nftHostports = mustName("hostports")
	nftMasq      = mustName("masquerade")
	nftKeyChains = []firewall.Name{nftHostports, nftMasq}
	loopback4    = netip.MustParseAddr("127.0.0.1")
)

func mustName(s string) firewall.Name {
	n, err := firewall.ParseName("name", s)
	if err != nil {
		panic(err)
	}
	return n
}

// Chain priorities: nftables' dstnat and srcnat.
const (
	prioDstNAT = -100
	prioSrcNAT = 100
)

// host is a full-length prefix: one address.
func host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// nftRuleset is the attachment's rules in the nftables layout.
func nftRuleset(r *request) *firewall.Ruleset {
	entry := []firewall.Rule{{Match: []firewall.Match{firewall.AddrType{Dst: true, Type: "LOCAL"}}, Verdict: firewall.Jump{Chain: nftHostports}}}
	rs := &firewall.Ruleset{
		Table: nftTable,
		Owner: firewall.Owner{Exact: r.Key},
		Shared: []*firewall.Chain{
			{Name: nftHostports},
			{Name: mustName("prerouting"), Hook: &firewall.Hook{Type: "nat", Hook: "prerouting", Priority: prioDstNAT}, Mode: firewall.Exactly, Rules: entry},
			{Name: mustName("output"), Hook: &firewall.Hook{Type: "nat", Hook: "output", Priority: prioDstNAT}, Mode: firewall.Exactly, Rules: entry},
			{Name: nftMasq, Hook: &firewall.Hook{Type: "nat", Hook: "postrouting", Priority: prioSrcNAT}},
		},
		// A repeated ADD that now needs no masquerade rules still finds
		// the old ones.
		Search: nftKeyChains,
	}
	rule := func(chain firewall.Name, fam firewall.Family, v firewall.Verdict, m ...firewall.Match) {
		rs.Rules = append(rs.Rules, firewall.Rule{Chain: chain, Family: fam, Match: m, Verdict: v, Comment: r.Comment})
	}
	for _, f := range r.families() {
		v6 := f.fam == firewall.IPv6
		for _, m := range r.Mappings {
			if !m.forFamily(v6) {
				continue
			}
			match := append([]firewall.Match{}, f.conds...)
			if d, ok := m.daddr(); ok {
				match = append(match, firewall.Addr{Dst: true, Prefix: host(d)})
			}
			match = append(match, firewall.DPort{Proto: m.proto(), Port: m.HostPort})
			rule(nftHostports, f.fam, firewall.DNAT{To: netip.AddrPortFrom(f.cont, m.ContainerPort)}, match...)
		}
		if !r.SNAT {
			continue
		}
		toCont := firewall.Addr{Dst: true, Prefix: host(f.cont)}
		if r.MasqAll {
			// Every connection DNATed to the container is masqueraded.
			rule(nftMasq, f.fam, firewall.Masquerade{}, toCont, firewall.CtDNAT{})
			continue
		}
		// Hairpin: the container, or a peer on its subnet, reaching the
		// container through a host port.
		rule(nftMasq, f.fam, firewall.Masquerade{}, firewall.Addr{Prefix: netip.PrefixFrom(f.cont, f.net.Bits()).Masked()}, toCont, firewall.CtDNAT{})
		if !v6 {
			// The host's own 127.0.0.1 reaching the container.
			rule(nftMasq, f.fam, firewall.Masquerade{}, firewall.Addr{Prefix: host(loopback4)}, toCont)
		}
	}
	return rs
}
