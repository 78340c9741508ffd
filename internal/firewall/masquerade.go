package firewall

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"

	"github.com/patchbay-cni/patchbay/spec"
)

// Masquerade is the ipMasq feature of the bridge and ptp plugins:
// traffic from a container address to anything outside its subnet, except
// multicast, leaves with the host's address.
//
// The nftables layout is the reference plugins' (table inet
// cni_plugins_masquerade: chain postrouting returns for multicast and goes
// to masq_checks, which holds one rule per container address commented
// "<hash>, net: N, if: I, id: C"), and so is the iptables one (chain
// CNI-<hash of network and container ID> in nat, jumped to from
// POSTROUTING, every rule commented `name: "N" id: "C"`). A node that
// switches between the reference plugins and ours therefore keeps one
// consistent rule set: either implementation's DEL or GC removes exactly
// the other's rules for that attachment.

// Attachment names one attachment's rules.
type Attachment struct {
	Network, IfName, ContainerID string
}

var (
	masqTable  = Table{Kind: NFTables, NFTFamily: "inet", Name: MustName("cni_plugins_masquerade")}
	masqChecks = MustName("masq_checks")
	masqPost   = MustName("postrouting")
	natTable   = MustName("nat")
	postrouted = MustName("POSTROUTING")
	mcast4     = netip.MustParsePrefix("224.0.0.0/4")
	mcast6     = netip.MustParsePrefix("ff00::/8")
)

// hashPrefix is the first n hex digits of sha512(s) after prefix, the
// reference plugins' naming scheme.
func hashPrefix(n int, prefix, s string) string {
	sum := sha512.Sum512([]byte(s))
	return (prefix + hex.EncodeToString(sum[:]))[:n]
}

func networkHash(network string) string { return hashPrefix(16, "", network) }

func instanceHash(a Attachment) string {
	return networkHash(a.Network) + "-" + hashPrefix(16, "", a.IfName+":"+a.ContainerID)
}

// masqComment is the reference's nftables comment, cut as the reference
// cuts it (the instance hash in front keeps it unique).
func masqComment(a Attachment) string {
	strip := func(s string) string { return strings.ReplaceAll(s, `"`, "") }
	c := fmt.Sprintf("%s, net: %s, if: %s, id: %s", instanceHash(a), strip(a.Network), strip(a.IfName), strip(a.ContainerID))
	if len(c) > nftComment {
		c = c[:nftComment]
	}
	return c
}

// The reference's iptables names (they ignore the interface name). A
// comment too long for iptables (the reference fails there) carries
// shortened, hashed names instead.
func masqIPTChain(a Attachment) string { return hashPrefix(28, "CNI-", a.Network+a.ContainerID) }
func masqIPTComment(a Attachment) string {
	c := fmt.Sprintf("name: %q id: %q", a.Network, a.ContainerID)
	if len(c) > MaxComment {
		c = fmt.Sprintf("name: %q id: %q", shortID(a.Network, 100), shortID(a.ContainerID, 130))
	}
	return c
}

// masqNFT is the nftables ruleset of an attachment's addresses.
func masqNFT(ips []netip.Prefix, a Attachment) (*Ruleset, error) {
	cm, err := NewComment("ipMasq rule comment", masqComment(a))
	if err != nil {
		return nil, err
	}
	rs := &Ruleset{
		Table: masqTable,
		Owner: Owner{Prefix: instanceHash(a)},
		Shared: []*Chain{
			{Name: masqChecks},
			{Name: masqPost, Hook: &Hook{Type: "nat", Hook: "postrouting", Priority: int(*nftables.ChainPriorityNATSource)}, Mode: Exactly,
				Rules: []Rule{
					{Family: IPv4, Match: []Match{Addr{Dst: true, Prefix: mcast4}}, Verdict: Return{}},
					{Family: IPv6, Match: []Match{Addr{Dst: true, Prefix: mcast6}}, Verdict: Return{}},
					{Verdict: Goto{Chain: masqChecks}},
				}},
		},
		Search: []Name{masqChecks},
	}
	for _, p := range ips {
		a := p.Addr().Unmap()
		rs.Rules = append(rs.Rules, Rule{
			Chain: masqChecks, Family: FamilyOf(a), Comment: cm, Verdict: Masquerade{},
			Match: []Match{
				Addr{Prefix: netip.PrefixFrom(a, a.BitLen())},
				Addr{Dst: true, Prefix: netip.PrefixFrom(a, p.Bits()).Masked(), Not: true},
			},
		})
	}
	return rs, nil
}

// masqIPT are the iptables rulesets, one per family of ips.
func masqIPT(ips []netip.Prefix, a Attachment) ([]*Ruleset, error) {
	cm, err := NewComment("ipMasq rule comment", masqIPTComment(a))
	if err != nil {
		return nil, err
	}
	chain, err := ParseName("ipMasq chain", masqIPTChain(a))
	if err != nil {
		return nil, err
	}
	var out []*Ruleset
	for _, fam := range []Family{IPv4, IPv6} {
		owned := &Chain{Name: chain}
		rs := &Ruleset{
			Table:  Table{Kind: IPTables, Name: natTable, Family: fam},
			Owner:  Owner{Exact: cm.s},
			Shared: []*Chain{{Name: postrouted, Hook: &Hook{Type: "nat", Hook: "postrouting"}, Mode: Present}},
			Owned:  []*Chain{owned},
		}
		mc := mcast4
		if fam == IPv6 {
			mc = mcast6
		}
		seen := map[netip.Prefix]bool{}
		for _, p := range ips {
			ad := p.Addr().Unmap()
			if FamilyOf(ad) != fam {
				continue
			}
			rs.Rules = append(rs.Rules, Rule{Chain: postrouted, Comment: cm, Verdict: Jump{Chain: chain},
				Match: []Match{Addr{Prefix: netip.PrefixFrom(ad, ad.BitLen())}}})
			// Subnets are accepted before the masquerade rule (the
			// reference appends them in address order).
			if sub := netip.PrefixFrom(ad, p.Bits()).Masked(); !seen[sub] {
				seen[sub] = true
				owned.Rules = append(owned.Rules, Rule{Comment: cm, Verdict: Accept{}, Match: []Match{Addr{Dst: true, Prefix: sub}}})
			}
		}
		if len(rs.Rules) == 0 {
			continue
		}
		owned.Rules = append(owned.Rules, Rule{Comment: cm, Verdict: Masquerade{}, Match: []Match{Addr{Dst: true, Prefix: mc, Not: true}}})
		out = append(out, rs)
	}
	return out, nil
}

// SetupMasquerade masquerades traffic from each address of ips (host bits
// set, prefix = the subnet) to outside that subnet, replacing any rules the
// attachment had. Run it in the host namespace.
func (s *Session) SetupMasquerade(k Kind, ips []netip.Prefix, a Attachment) error {
	var rss []*Ruleset
	var err error
	if k == IPTables {
		if rss, err = masqIPT(ips, a); err != nil {
			return err
		}
	} else {
		rs, err := masqNFT(ips, a)
		if err != nil {
			return err
		}
		rss = []*Ruleset{rs}
	}
	if err := s.Backend(k).Apply(rss...); err != nil {
		return fmt.Errorf("install masquerade rules: %w", err)
	}
	return nil
}

// TeardownMasquerade removes the attachment's masquerade rules. The
// nftables rules are always looked for (a netlink dump, cheap); iptables
// only when the backend is iptables or the attachment's chain is seen in
// the iptables-nft nat tables over netlink, so that a DEL on a pure
// nftables node execs nothing. ips only narrow the iptables families.
func (s *Session) TeardownMasquerade(k Kind, ips []netip.Prefix, a Attachment) error {
	err := s.Backend(NFTables).Remove(Selector{Table: masqTable, Owner: Owner{Prefix: instanceHash(a)}, In: []Name{masqChecks}})
	if err != nil {
		return fmt.Errorf("remove masquerade rules: %w", err)
	}
	chain := masqIPTChain(a)
	if k != IPTables && !s.nftChainExists(nftables.TableFamilyIPv4, "nat", chain) && !s.nftChainExists(nftables.TableFamilyIPv6, "nat", chain) {
		return nil
	}
	fam := AnyFamily
	if len(ips) > 0 {
		fam = FamilyOf(ips[0].Addr())
		for _, p := range ips[1:] {
			if FamilyOf(p.Addr()) != fam {
				fam = AnyFamily
			}
		}
	}
	ch, err := ParseName("ipMasq chain", chain)
	if err != nil {
		return err
	}
	err = s.Backend(IPTables).Remove(Selector{Table: Table{Kind: IPTables, Name: natTable, Family: fam},
		Owner: Owner{Exact: masqIPTComment(a)}, In: []Name{postrouted}, Chains: []Name{ch}})
	if err != nil {
		return fmt.Errorf("remove iptables masquerade rules: %w", err)
	}
	return nil
}

// GCMasquerade removes the nftables masquerade rules of network whose
// attachment is not in valid.
func (s *Session) GCMasquerade(network string, valid []spec.Attachment) error {
	var keep []string
	for _, v := range valid {
		keep = append(keep, instanceHash(Attachment{Network: network, IfName: v.IfName, ContainerID: v.ContainerID})+",")
	}
	return s.Backend(NFTables).Remove(Selector{Table: masqTable, Owner: Owner{Prefix: networkHash(network), KeepPrefixes: keep}, In: []Name{masqChecks}})
}
