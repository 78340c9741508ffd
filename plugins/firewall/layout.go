package firewall

import (
	"net/netip"

	fw "github.com/patchbay-cni/patchbay/internal/firewall"
)

// The rule layout, the reference firewall plugin's (v1.9.1), so that a node
// can switch between the two and either one's DEL removes the other's
// rules. iptables, filter table, for each IP family the attachment has:
//
//	FORWARD (first):  -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
//	CNI-FORWARD:      -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN   (first)
//	                  -d IP/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT            (per address,
//	                  -s IP/32 -j ACCEPT                                                        uncommented)
//	CNI-ADMIN:        the operator's (iptablesAdminChainName)
//
// and for ingressPolicy same-bridge or isolated (per bridge, shared by the
// bridge's attachments; comments "CNI firewall plugin rules (ingressPolicy:
// ...)"):
//
//	FORWARD (first):  -j CNI-ISOLATION-STAGE-1
//	STAGE-1:          -i BR ! -o BR -j CNI-ISOLATION-STAGE-2   (first)
//	                  -i BR -o BR -j DROP                     (isolated; first)
//	                  -j RETURN                                (last)
//	STAGE-2:          -o BR -j DROP                            (first)
//	                  -j RETURN                                (last)
//
// The nftables backend (ours; the reference has none) keeps the same
// chains and rules in table inet patchbay_firewall, entered from its base
// chain "forward" (filter hook, priority filter) instead of FORWARD; there
// the per-address rules carry the attachment's comment (AttachmentComment),
// so DEL and GC find them without a record.
//
// Unlike the reference, the last DEL takes the scaffolding away again: a
// chain goes when it holds nothing but its own scaffolding and only our
// jumps lead to it (firewall.Prune), and a bridge's isolation rules go
// when the bridge has no port left but the departing container's.

var (
	tableFilter  = fw.MustName("filter")
	chainFORWARD = fw.MustName("FORWARD")
	chainFwd     = fw.MustName("CNI-FORWARD")
	chainStage1  = fw.MustName("CNI-ISOLATION-STAGE-1")
	chainStage2  = fw.MustName("CNI-ISOLATION-STAGE-2")
	nftEntry     = fw.MustName("forward")
	nftTable     = fw.Table{Kind: fw.NFTables, NFTFamily: "inet", Name: fw.MustName("patchbay_firewall")}

	cmRules      = fw.MustComment("CNI firewall plugin rules")
	cmAdmin      = fw.MustComment("CNI firewall plugin admin overrides")
	cmPolicy     = fw.MustComment("CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)")
	cmSameBridge = fw.MustComment("CNI firewall plugin rules (ingressPolicy: same-bridge)")
	cmIsolated   = fw.MustComment("CNI firewall plugin rules (ingressPolicy: isolated)")

	ctReplies = fw.CtState{States: []string{"RELATED", "ESTABLISHED"}}
)

// what names the plugin's rules in attachment comments.
const what = "firewall"

// layout is one backend's placement of the rules: the entry chain (the
// built-in FORWARD, or our nftables base chain) and the table.
type layout struct {
	kind  fw.Kind
	entry *fw.Chain
}

func iptLayout() layout {
	return layout{kind: fw.IPTables, entry: &fw.Chain{Name: chainFORWARD, Hook: &fw.Hook{Type: "filter", Hook: "forward"}}}
}

func nftLayout() layout {
	return layout{kind: fw.NFTables, entry: &fw.Chain{Name: nftEntry, Hook: &fw.Hook{Type: "filter", Hook: "forward", Priority: 0}}}
}

func (l layout) table(fam fw.Family) fw.Table {
	if l.kind == fw.NFTables {
		return nftTable
	}
	return fw.Table{Kind: fw.IPTables, Name: tableFilter, Family: fam}
}

func (l layout) fwdJump() fw.Rule {
	return fw.Rule{Chain: l.entry.Name, Comment: cmRules, Verdict: fw.Jump{Chain: chainFwd}, First: true}
}

func (l layout) stageJump() fw.Rule {
	return fw.Rule{Chain: l.entry.Name, Comment: cmPolicy, Verdict: fw.Jump{Chain: chainStage1}, First: true}
}

func adminJump(admin fw.Name) fw.Rule {
	return fw.Rule{Chain: chainFwd, Comment: cmAdmin, Verdict: fw.Jump{Chain: admin}, First: true}
}

func host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// addrRules are one address's two rules: replies to it, and everything
// from it, accepted.
func addrRules(a netip.Addr, cm fw.Comment) []fw.Rule {
	fam := fw.FamilyOf(a)
	return []fw.Rule{
		{Chain: chainFwd, Family: fam, Comment: cm, Match: []fw.Match{fw.Addr{Dst: true, Prefix: host(a)}, ctReplies}, Verdict: fw.Accept{}},
		{Chain: chainFwd, Family: fam, Comment: cm, Match: []fw.Match{fw.Addr{Prefix: host(a)}}, Verdict: fw.Accept{}},
	}
}

// bridgeRules are a bridge's isolation rules for a policy, stage 1 then
// stage 2, in the order the reference inserts them.
func bridgeRules(br fw.IfName, policy string) (stage1, stage2 []fw.Rule) {
	cm := cmSameBridge
	if policy == policyIsolated {
		cm = cmIsolated
	}
	stage1 = []fw.Rule{{Chain: chainStage1, Comment: cm, First: true, Verdict: fw.Jump{Chain: chainStage2},
		Match: []fw.Match{fw.Iface{Name: br}, fw.Iface{Out: true, Name: br, Not: true}}}}
	if policy == policyIsolated {
		stage1 = append(stage1, fw.Rule{Chain: chainStage1, Comment: cm, First: true, Verdict: fw.Drop{},
			Match: []fw.Match{fw.Iface{Name: br}, fw.Iface{Out: true, Name: br}}})
	}
	stage1 = append(stage1, stageReturn(chainStage1))
	stage2 = []fw.Rule{
		{Chain: chainStage2, Comment: cmPolicy, First: true, Verdict: fw.Drop{}, Match: []fw.Match{fw.Iface{Out: true, Name: br}}},
		stageReturn(chainStage2),
	}
	return stage1, stage2
}

func stageReturn(chain fw.Name) fw.Rule {
	return fw.Rule{Chain: chain, Comment: cmPolicy, Verdict: fw.Return{}}
}

// bridgeRulesAnyPolicy are every rule a bridge may have under either
// policy (what goes when the bridge is no longer used).
func bridgeRulesAnyPolicy(br fw.IfName) []fw.Rule {
	var out []fw.Rule
	for _, p := range []string{policySameBridge, policyIsolated} {
		s1, s2 := bridgeRules(br, p)
		out = append(out, s1[:len(s1)-1]...)
		out = append(out, s2[0])
	}
	return out
}

// want is what an attachment needs.
type want struct {
	admin  fw.Name
	ips    []netip.Addr
	bridge fw.IfName // zero: no ingress policy
	policy string
	// addrs false: only the isolation rules (firewalld keeps the
	// addresses, iptables the isolation).
	addrs bool
	// comment and owner tag the per-address rules (nftables only).
	comment fw.Comment
	owner   fw.Owner
}

// rulesets are what w needs in layout l: one ruleset per family for
// iptables, one for nftables.
func (l layout) rulesets(w *want) []*fw.Ruleset {
	fams := families(w.ips)
	if l.kind == fw.NFTables {
		fams = []fw.Family{fw.AnyFamily}
	}
	var out []*fw.Ruleset
	for _, fam := range fams {
		entry := &fw.Chain{Name: l.entry.Name, Hook: l.entry.Hook}
		rs := &fw.Ruleset{Table: l.table(fam), Owner: w.owner}
		if rs.Owner.Exact == "" && rs.Owner.Prefix == "" {
			rs.Owner = fw.Owner{Exact: cmRules.String()}
		}
		rs.Shared = append(rs.Shared, entry)
		if w.addrs {
			entry.Rules = append(entry.Rules, l.fwdJump())
			fwd := &fw.Chain{Name: chainFwd, Rules: []fw.Rule{adminJump(w.admin)}}
			rs.Shared = append(rs.Shared, fwd, &fw.Chain{Name: w.admin})
			for _, a := range w.ips {
				if l.kind == fw.NFTables {
					rs.Rules = append(rs.Rules, addrRules(a, w.comment)...)
				} else if fw.FamilyOf(a) == fam {
					// The reference's rules carry no comment: kept
					// present like its AppendUnique, removed by value.
					fwd.Rules = append(fwd.Rules, addrRules(a, fw.Comment{})...)
				}
			}
		}
		if w.bridge.String() != "" {
			// Inserted after the CNI-FORWARD jump, so it ends up first.
			entry.Rules = append(entry.Rules, l.stageJump())
			s1, s2 := bridgeRules(w.bridge, w.policy)
			rs.Shared = append(rs.Shared, &fw.Chain{Name: chainStage1, Rules: s1}, &fw.Chain{Name: chainStage2, Rules: s2})
		}
		out = append(out, rs)
	}
	return out
}

// removal is what goes with an attachment in layout l: its per-address
// rules (by value for iptables, by owner for nftables), its bridge's
// isolation rules when the bridge is no longer used (bridge not zero), and
// the scaffolding that nothing needs any more.
func (l layout) removal(fam fw.Family, admin fw.Name, ips []netip.Addr, owner fw.Owner, bridge fw.IfName) fw.Selector {
	sel := fw.Selector{Table: l.table(fam), Owner: owner}
	if l.kind == fw.NFTables {
		sel.In = []fw.Name{chainFwd}
		sel.DropEmptyTable = true
	} else {
		for _, a := range ips {
			sel.Rules = append(sel.Rules, addrRules(a, fw.Comment{})...)
		}
	}
	if bridge.String() != "" {
		sel.Rules = append(sel.Rules, bridgeRulesAnyPolicy(bridge)...)
	}
	sel.Prune = []fw.Prune{
		{Chain: chainFwd, Idle: []fw.Rule{adminJump(admin)}, From: []fw.Rule{l.fwdJump()}},
		{Chain: admin},
		{Chain: chainStage1, Idle: []fw.Rule{stageReturn(chainStage1)}, From: []fw.Rule{l.stageJump()}},
		{Chain: chainStage2, Idle: []fw.Rule{stageReturn(chainStage2)}},
	}
	if l.kind == fw.NFTables {
		sel.Prune = append(sel.Prune, fw.Prune{Chain: nftEntry, Hook: l.entry.Hook})
	}
	return sel
}
