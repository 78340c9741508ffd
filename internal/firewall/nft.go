package firewall

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The nftables backend talks netlink through the session's one
// connection: reads are dumps, and each Apply or Remove is one batch, one
// transaction. It writes only what is missing or wrong: re-adding an
// existing chain or rewriting a rule queues kernel objects for RCU-deferred
// release, which the socket's close then waits for (~10 ms).
type nftBackend struct{ s *Session }

func (b *nftBackend) Kind() Kind { return NFTables }

// nftFamily is the nftables family of a table family name.
func nftFamily(name string) (nftables.TableFamily, bool) {
	switch name {
	case "inet":
		return nftables.TableFamilyINet, true
	case "ip":
		return nftables.TableFamilyIPv4, true
	case "ip6":
		return nftables.TableFamilyIPv6, true
	case "bridge":
		return nftables.TableFamilyBridge, true
	case "arp":
		return nftables.TableFamilyARP, true
	case "netdev":
		return nftables.TableFamilyNetdev, true
	}
	return 0, false
}

func nftTable(t Table) (*nftables.Table, error) {
	fam, ok := nftFamily(t.NFTFamily)
	if t.Kind != NFTables || !ok || t.Name.IsZero() {
		return nil, fmt.Errorf("firewall: %v is not an nftables table", t)
	}
	return &nftables.Table{Name: t.Name.s, Family: fam}, nil
}

func chainType(s string) (nftables.ChainType, bool) {
	switch s {
	case "nat":
		return nftables.ChainTypeNAT, true
	case "filter":
		return nftables.ChainTypeFilter, true
	case "route":
		return nftables.ChainTypeRoute, true
	}
	return "", false
}

func chainHook(s string) (*nftables.ChainHook, bool) {
	switch s {
	case "prerouting":
		return nftables.ChainHookPrerouting, true
	case "input":
		return nftables.ChainHookInput, true
	case "forward":
		return nftables.ChainHookForward, true
	case "output":
		return nftables.ChainHookOutput, true
	case "postrouting":
		return nftables.ChainHookPostrouting, true
	}
	return nil, false
}

func nftChain(t *nftables.Table, ch *Chain) (*nftables.Chain, error) {
	c := &nftables.Chain{Name: ch.Name.s, Table: t}
	if h := ch.Hook; h != nil {
		typ, ok1 := chainType(h.Type)
		hook, ok2 := chainHook(h.Hook)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("firewall: chain %s: unknown type %q or hook %q", ch.Name, h.Type, h.Hook)
		}
		c.Type, c.Hooknum, c.Priority = typ, hook, nftables.ChainPriorityRef(nftables.ChainPriority(h.Priority))
		pol := nftables.ChainPolicyAccept
		if h.Policy == "drop" {
			pol = nftables.ChainPolicyDrop
		}
		c.Policy = &pol
	}
	return c, nil
}

// nftTx plans one transaction from fresh reads and commits it.
type nftTx struct {
	s *Session
	c *nftables.Conn
	// what has been read (per family: chain names by table; per chain: rules)
	chainsByFam map[nftables.TableFamily]map[string]map[string]bool
	chainInfo   map[string]*nftables.Chain // by ckey
	rules       map[string][]*nftables.Rule
	// what has been queued
	tables, chains, shared map[string]bool
	msgs, bytes, newRules  int
}

func newTx(s *Session, c *nftables.Conn) *nftTx {
	return &nftTx{s: s, c: c, chainsByFam: map[nftables.TableFamily]map[string]map[string]bool{}, chainInfo: map[string]*nftables.Chain{},
		rules: map[string][]*nftables.Rule{}, tables: map[string]bool{}, chains: map[string]bool{}, shared: map[string]bool{}}
}

func tkey(t *nftables.Table) string               { return fmt.Sprintf("%d %s", t.Family, t.Name) }
func ckey(t *nftables.Table, chain string) string { return tkey(t) + " " + chain }

// present lists the table's chains (one dump per family and transaction);
// a missing table has none.
func (tx *nftTx) present(t *nftables.Table) (map[string]bool, error) {
	byTable, ok := tx.chainsByFam[t.Family]
	if !ok {
		chains, err := tx.c.ListChainsOfTableFamily(t.Family)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("list nftables chains: %w", err)
		}
		byTable = map[string]map[string]bool{}
		for _, ch := range chains {
			if ch.Table == nil {
				continue
			}
			if byTable[ch.Table.Name] == nil {
				byTable[ch.Table.Name] = map[string]bool{}
			}
			byTable[ch.Table.Name][ch.Name] = true
			tx.chainInfo[ckey(ch.Table, ch.Name)] = ch
		}
		tx.chainsByFam[t.Family] = byTable
	}
	return byTable[t.Name], nil
}

// rulesOf dumps a chain's rules (once per transaction).
func (tx *nftTx) rulesOf(t *nftables.Table, chain string) ([]*nftables.Rule, error) {
	k := ckey(t, chain)
	if r, ok := tx.rules[k]; ok {
		return r, nil
	}
	rules, err := tx.c.GetRules(t, &nftables.Chain{Name: chain, Table: t})
	// The library formats this error with %v, so ENOENT (the chain went
	// away since it was listed: it holds nothing) shows only in the text.
	if err != nil && !errors.Is(err, unix.ENOENT) && !strings.Contains(err.Error(), unix.ENOENT.Error()) {
		return nil, fmt.Errorf("list rules of %s %s: %w", t.Name, chain, err)
	}
	tx.rules[k] = rules
	return rules, nil
}

func (tx *nftTx) addTable(t *nftables.Table) {
	if tx.tables[tkey(t)] {
		return
	}
	tx.tables[tkey(t)] = true
	tx.c.AddTable(t)
	tx.msgs++
	tx.bytes += 128
}

func (tx *nftTx) addChain(c *nftables.Chain) {
	if tx.chains[ckey(c.Table, c.Name)] {
		return
	}
	tx.chains[ckey(c.Table, c.Name)] = true
	tx.c.AddChain(c)
	tx.msgs++
	tx.bytes += 128 + len(c.Name)
}

func (tx *nftTx) flushChain(c *nftables.Chain) {
	tx.c.FlushChain(c)
	tx.msgs++
	tx.bytes += 128 + len(c.Name)
}

func (tx *nftTx) delChain(c *nftables.Chain) {
	tx.c.DelChain(c)
	tx.msgs++
	tx.bytes += 128 + len(c.Name)
}

func (tx *nftTx) delRule(r *nftables.Rule) error {
	if err := tx.c.DelRule(r); err != nil {
		return err
	}
	tx.msgs++
	tx.bytes += 128 + len(r.Chain.Name)
	return nil
}

// wantRule is a rendered rule.
type wantRule struct {
	exprs   []expr.Any
	comment string
	first   bool
}

func render(t *nftables.Table, rules []Rule) ([]wantRule, error) {
	out := make([]wantRule, len(rules))
	for i := range rules {
		ex, err := nftExprs(t.Family, &rules[i])
		if err != nil {
			return nil, fmt.Errorf("firewall: rule %d: %w", i, err)
		}
		out[i] = wantRule{exprs: ex, comment: rules[i].Comment.s, first: rules[i].First}
	}
	return out, nil
}

func renderPtrs(t *nftables.Table, rules []*Rule) ([]wantRule, error) {
	rs := make([]Rule, len(rules))
	for i, r := range rules {
		rs[i] = *r
	}
	return render(t, rs)
}

func (tx *nftTx) addRule(c *nftables.Chain, w wantRule) error {
	r := &nftables.Rule{Table: c.Table, Chain: c, Exprs: w.exprs, UserData: commentData(Comment{w.comment})}
	size, err := ruleMsgSize(c, r)
	if err != nil {
		return err
	}
	if w.first {
		tx.c.InsertRule(r)
	} else {
		tx.c.AddRule(r)
	}
	tx.msgs++
	tx.newRules++
	tx.bytes += size
	return nil
}

// ruleMsgSize bounds a new-rule message's size: netlink and nfgen headers,
// table and chain names, the expressions as the library marshals them,
// the user data, and room for the optional attributes.
func ruleMsgSize(c *nftables.Chain, r *nftables.Rule) (int, error) {
	attr := func(n int) int { return 4 + (n+3)&^3 }
	n := 16 + 4 + attr(len(c.Table.Name)+1) + attr(len(c.Name)+1) + 4 + attr(len(r.UserData)) + 64
	for _, e := range r.Exprs {
		b, err := expr.Marshal(byte(c.Table.Family), e)
		if err != nil {
			return 0, fmt.Errorf("firewall: marshal %T: %w", e, err)
		}
		n += attr(len(b))
	}
	return n, nil
}

func sameRule(got *nftables.Rule, w wantRule) bool {
	return ruleComment(got) == w.comment && reflect.DeepEqual(got.Exprs, w.exprs)
}

func sameRules(got []*nftables.Rule, want []wantRule) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !sameRule(got[i], want[i]) {
			return false
		}
	}
	return true
}

func (tx *nftTx) commit() error {
	if tx.msgs == 0 {
		return nil
	}
	if err := tx.s.sizeFor(tx.bytes, tx.msgs, tx.newRules); err != nil {
		return err
	}
	if err := tx.c.Flush(); err != nil {
		return &batchError{err: err, msg: fmt.Sprintf("nftables transaction of %d messages: %s", tx.msgs, summarize(err))}
	}
	return nil
}

// batchError keeps a failed commit's errors (for errors.Is) under a short
// message: the library joins one error per refused message, and a refused
// batch of 2000 rules would otherwise make a 2000-line CNI error.
type batchError struct {
	err error
	msg string
}

func (e *batchError) Error() string { return e.msg }
func (e *batchError) Unwrap() error { return e.err }

// summarize lists an error's distinct lines, each once with its count.
func summarize(err error) string {
	var order []string
	n := map[string]int{}
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		if n[l] == 0 {
			order = append(order, l)
		}
		n[l]++
	}
	for i, l := range order {
		if n[l] > 1 {
			order[i] = fmt.Sprintf("%s (%d times)", l, n[l])
		}
	}
	return strings.Join(order, "; ")
}

func (b *nftBackend) Apply(rss ...*Ruleset) error {
	for _, rs := range rss {
		if err := rs.validate(); err != nil {
			return err
		}
	}
	return b.s.nftRetry(func(tx *nftTx) error {
		for _, rs := range rss {
			if err := tx.plan(rs); err != nil {
				return err
			}
		}
		return tx.commit()
	})
}

func (tx *nftTx) plan(rs *Ruleset) error {
	t, err := nftTable(rs.Table)
	if err != nil {
		return err
	}
	present, err := tx.present(t)
	if err != nil {
		return err
	}
	if len(present) == 0 {
		tx.addTable(t)
	}
	chains := map[string]*nftables.Chain{}
	for _, ch := range append(slices.Clone(rs.Shared), rs.Owned...) {
		c, err := nftChain(t, ch)
		if err != nil {
			return err
		}
		chains[ch.Name.s] = c
		if !present[ch.Name.s] {
			tx.addChain(c)
		}
	}
	chainOf := func(n Name) *nftables.Chain {
		if c, ok := chains[n.s]; ok {
			return c
		}
		return &nftables.Chain{Name: n.s, Table: t}
	}
	var adds []func() error
	for _, ch := range rs.Shared {
		if tx.shared[ckey(t, ch.Name.s)] {
			continue // an earlier ruleset of this transaction saw to it
		}
		tx.shared[ckey(t, ch.Name.s)] = true
		if ch.Mode == Present && len(ch.Rules) == 0 {
			continue // it only has to exist
		}
		want, err := render(t, ch.Rules)
		if err != nil {
			return err
		}
		c := chains[ch.Name.s]
		var got []*nftables.Rule
		if present[ch.Name.s] {
			if ch.Mode == Seed {
				continue
			}
			if got, err = tx.rulesOf(t, ch.Name.s); err != nil {
				return err
			}
		}
		switch ch.Mode {
		case Exactly:
			if sameRules(got, want) {
				continue
			}
			if len(got) > 0 {
				tx.flushChain(c)
			}
		case Present:
			want = slices.DeleteFunc(want, func(w wantRule) bool {
				return slices.ContainsFunc(got, func(g *nftables.Rule) bool { return sameRule(g, w) })
			})
		}
		for _, w := range want {
			adds = append(adds, func() error { return tx.addRule(c, w) })
		}
	}
	for _, ch := range rs.Owned {
		want, err := render(t, ch.Rules)
		if err != nil {
			return err
		}
		c := chains[ch.Name.s]
		if present[ch.Name.s] {
			got, err := tx.rulesOf(t, ch.Name.s)
			if err != nil {
				return err
			}
			if sameRules(got, want) {
				continue
			}
			if len(got) > 0 {
				tx.flushChain(c)
			}
		}
		for _, w := range want {
			adds = append(adds, func() error { return tx.addRule(c, w) })
		}
	}
	for _, n := range rs.chainsOfRules() {
		want, err := renderPtrs(t, rs.rulesIn(n))
		if err != nil {
			return err
		}
		var old []*nftables.Rule
		if present[n.s] {
			got, err := tx.rulesOf(t, n.s)
			if err != nil {
				return err
			}
			for _, g := range got {
				if rs.Owner.owns(ruleComment(g)) {
					old = append(old, g)
				}
			}
		}
		if sameRules(old, want) {
			continue
		}
		for _, o := range old {
			if err := tx.delRule(o); err != nil {
				return err
			}
		}
		c := chainOf(n)
		for _, w := range want {
			adds = append(adds, func() error { return tx.addRule(c, w) })
		}
	}
	for _, add := range adds {
		if err := add(); err != nil {
			return err
		}
	}
	return nil
}

func (b *nftBackend) Remove(sel Selector) error {
	t, err := nftTable(sel.Table)
	if err != nil {
		return err
	}
	return b.s.nftRetry(func(tx *nftTx) error {
		present, err := tx.present(t)
		if err != nil || len(present) == 0 {
			return err
		}
		var in []string
		for _, n := range sel.In {
			in = append(in, n.s)
		}
		if len(in) == 0 {
			for n := range present {
				in = append(in, n)
			}
			slices.Sort(in)
		}
		drop := map[string]bool{}
		var dropOrder []string
		dropChain := func(n string) {
			if present[n] && !drop[n] {
				drop[n] = true
				dropOrder = append(dropOrder, n)
			}
		}
		for _, n := range sel.Chains {
			dropChain(n.s)
		}
		var selected []*nftables.Rule
		for _, n := range in {
			if !present[n] {
				continue
			}
			rules, err := tx.rulesOf(t, n)
			if err != nil {
				return err
			}
			for _, r := range rules {
				if sel.Owner.owns(ruleComment(r)) {
					selected = append(selected, r)
					if to := nftTarget(r); to != "" && sel.ChainPrefix != "" && strings.HasPrefix(to, sel.ChainPrefix) {
						dropChain(to)
					}
				}
			}
		}
		// Rules elsewhere in the searched chains that still lead to a
		// dropped chain go too, or the chain could not be deleted.
		for _, n := range in {
			if drop[n] {
				continue
			}
			for _, r := range tx.rules[ckey(t, n)] {
				if to := nftTarget(r); drop[to] && !slices.Contains(selected, r) {
					selected = append(selected, r)
				}
			}
		}
		for i := range sel.Rules {
			r := &sel.Rules[i]
			if !present[r.Chain.s] {
				continue
			}
			ex, err := nftExprs(t.Family, r)
			if err != nil {
				return fmt.Errorf("firewall: rule to remove from %s: %w", r.Chain, err)
			}
			rules, err := tx.rulesOf(t, r.Chain.s)
			if err != nil {
				return err
			}
			for _, g := range rules {
				if sameRule(g, wantRule{exprs: ex, comment: r.Comment.s}) && !slices.Contains(selected, g) {
					selected = append(selected, g)
				}
			}
		}
		if len(sel.Prune) > 0 {
			v, err := tx.view(t, present)
			if err != nil {
				return err
			}
			removed := map[ruleRef]bool{}
			for _, r := range selected {
				removed[v.ref(r)] = true
			}
			dropOrder = append(dropOrder, planPrunes(v, sel.Prune, removed, drop)...)
			for ref := range removed {
				if r := v.rules[ref.chain][ref.i]; !slices.Contains(selected, r) {
					selected = append(selected, r)
				}
			}
		}
		if sel.DropEmptyTable && len(drop) == len(present) {
			tx.c.DelTable(t)
			tx.msgs++
			tx.bytes += 128
			return tx.commit()
		}
		for _, r := range selected {
			if drop[r.Chain.Name] {
				continue // flushed with its chain
			}
			if err := tx.delRule(r); err != nil {
				return err
			}
		}
		for _, n := range dropOrder {
			tx.flushChain(&nftables.Chain{Name: n, Table: t})
		}
		for _, n := range dropOrder {
			tx.delChain(&nftables.Chain{Name: n, Table: t})
		}
		return tx.commit()
	})
}

// nftView is a table's chains and rules for planning prunes.
type nftView struct {
	tx    *nftTx
	t     *nftables.Table
	names []string
	rules map[string][]*nftables.Rule
}

// view reads every chain of the table (its rules once per transaction).
func (tx *nftTx) view(t *nftables.Table, present map[string]bool) (*nftView, error) {
	v := &nftView{tx: tx, t: t, rules: map[string][]*nftables.Rule{}}
	for n := range present {
		rules, err := tx.rulesOf(t, n)
		if err != nil {
			return nil, err
		}
		v.names = append(v.names, n)
		v.rules[n] = rules
	}
	slices.Sort(v.names)
	return v, nil
}

func (v *nftView) ref(r *nftables.Rule) ruleRef {
	return ruleRef{r.Chain.Name, slices.Index(v.rules[r.Chain.Name], r)}
}

func (v *nftView) chainNames() []string       { return v.names }
func (v *nftView) ruleCount(chain string) int { return len(v.rules[chain]) }
func (v *nftView) targetOf(r ruleRef) string  { return nftTarget(v.rules[r.chain][r.i]) }

// deletable: a base chain must have the hook, type and priority given.
func (v *nftView) deletable(chain string, hook *Hook) bool {
	c := v.tx.chainInfo[ckey(v.t, chain)]
	if c == nil {
		return false
	}
	if hook == nil || c.Hooknum == nil {
		return hook == nil && c.Hooknum == nil
	}
	want, err := nftChain(v.t, &Chain{Name: Name{s: chain}, Hook: hook})
	return err == nil && *c.Hooknum == *want.Hooknum && c.Type == want.Type &&
		c.Priority != nil && *c.Priority == *want.Priority
}

func (v *nftView) equal(r ruleRef, want *Rule) bool {
	ex, err := nftExprs(v.t.Family, want)
	return err == nil && sameRule(v.rules[r.chain][r.i], wantRule{exprs: ex, comment: want.Comment.s})
}

// nftTarget is the chain a rule jumps or goes to, if any.
func nftTarget(r *nftables.Rule) string {
	if len(r.Exprs) == 0 {
		return ""
	}
	if v, ok := r.Exprs[len(r.Exprs)-1].(*expr.Verdict); ok && (v.Kind == expr.VerdictJump || v.Kind == expr.VerdictGoto) {
		return v.Chain
	}
	return ""
}

func (b *nftBackend) Check(rs *Ruleset) error {
	if err := rs.validate(); err != nil {
		return err
	}
	t, err := nftTable(rs.Table)
	if err != nil {
		return err
	}
	c, err := b.s.conn()
	if err != nil {
		return err
	}
	tx := newTx(b.s, c)
	present, err := tx.present(t)
	if err != nil {
		return err
	}
	all := append(slices.Clone(rs.Shared), rs.Owned...)
	for _, ch := range all {
		if !present[ch.Name.s] {
			return fmt.Errorf("nftables chain %s %s is missing", rs.Table, ch.Name)
		}
	}
	for _, ch := range all {
		isOwned := slices.Contains(rs.Owned, ch)
		if !isOwned && (ch.Mode == Seed || len(ch.Rules) == 0 && ch.Mode == Present) {
			continue // the first user's content, or nothing required
		}
		want, err := render(t, ch.Rules)
		if err != nil {
			return err
		}
		got, err := tx.rulesOf(t, ch.Name.s)
		if err != nil {
			return err
		}
		if !isOwned && ch.Mode == Present {
			for _, w := range want {
				if !slices.ContainsFunc(got, func(g *nftables.Rule) bool { return sameRule(g, w) }) {
					return fmt.Errorf("nftables chain %s %s lacks a rule it needs", rs.Table, ch.Name)
				}
			}
			continue
		}
		if err := diffRules(rs.Table, ch.Name, got, want); err != nil {
			return err
		}
	}
	for _, n := range rs.chainsOfRules() {
		want, err := renderPtrs(t, rs.rulesIn(n))
		if err != nil {
			return err
		}
		if !present[n.s] {
			if len(want) == 0 {
				continue
			}
			return fmt.Errorf("nftables chain %s %s is missing", rs.Table, n)
		}
		got, err := tx.rulesOf(t, n.s)
		if err != nil {
			return err
		}
		got = slices.DeleteFunc(slices.Clone(got), func(g *nftables.Rule) bool { return !rs.Owner.owns(ruleComment(g)) })
		if err := diffRules(rs.Table, n, got, want); err != nil {
			return err
		}
	}
	return nil
}

// diffRules says how got differs from want.
func diffRules(t Table, chain Name, got []*nftables.Rule, want []wantRule) error {
	if len(got) != len(want) {
		return fmt.Errorf("nftables chain %s %s has %d of this attachment's rules, expected %d", t, chain, len(got), len(want))
	}
	for i := range want {
		if c := ruleComment(got[i]); c != want[i].comment {
			return fmt.Errorf("nftables chain %s %s: rule %d has comment %q, expected %q", t, chain, i, c, want[i].comment)
		}
		if !reflect.DeepEqual(got[i].Exprs, want[i].exprs) {
			return fmt.Errorf("nftables chain %s %s: rule %d differs from the expected one: %s", t, chain, i, exprDiff(got[i].Exprs, want[i].exprs))
		}
	}
	return nil
}

// exprDiff names the first differing expression.
func exprDiff(got, want []expr.Any) string {
	for i := 0; i < len(got) && i < len(want); i++ {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("expression %d is %#v, expected %#v", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d expressions, expected %d", len(got), len(want))
}

// nftChainExists reports whether a chain exists, over netlink (no dump of
// the family). Used to notice iptables-nft chains without running iptables.
func (s *Session) nftChainExists(fam nftables.TableFamily, table, chain string) bool {
	c, err := s.conn()
	if err != nil {
		return false
	}
	ch, err := c.ListChain(&nftables.Table{Name: table, Family: fam}, chain)
	return err == nil && ch != nil
}
