package firewall

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The iptables backend reads a table with iptables-save and changes it with
// one iptables-restore --noflush per table and family (atomic per table),
// under a file lock that serialises our own read-modify-write cycles. The
// restore input is built only from typed rules, and every token is checked
// again as it is written.
type iptBackend struct{ s *Session }

func (b *iptBackend) Kind() Kind { return IPTables }

func tool(f Family, what string) string {
	if f == IPv6 {
		return "ip6tables-" + what
	}
	return "iptables-" + what
}

func iptSave(f Family, table string) (*iptState, error) {
	cmd := exec.Command(tool(f, "save"), "-t", table)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t %s: %v: %s", tool(f, "save"), table, err, strings.TrimSpace(stderr.String()))
	}
	return parseIPTSave(string(out)), nil
}

func iptRestore(f Family, s *iptScript) error {
	in := s.String()
	cmd := exec.Command(tool(f, "restore"), "--noflush", "-w")
	cmd.Stdin = strings.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	// The line number in the error output ("line N failed", or "Error
	// occurred at line: N"), compiled only on this error path.
	if m := regexp.MustCompile(`line:? (\d+)`).FindStringSubmatch(msg); m != nil {
		if n, _ := strconv.Atoi(m[1]); n >= 1 && n <= strings.Count(in, "\n") {
			msg += fmt.Sprintf(" (line %d: %s)", n, strings.Split(in, "\n")[n-1])
		}
	}
	return fmt.Errorf("%s: %v: %s", tool(f, "restore"), err, msg)
}

func iptTableOf(t Table) (string, error) {
	if t.Kind != IPTables || !t.Name.ipt {
		return "", fmt.Errorf("firewall: %v is not an iptables table", t)
	}
	return t.Name.s, nil
}

func renderIPT(fam Family, rules []*Rule) ([][]string, error) {
	out := make([][]string, len(rules))
	for i, r := range rules {
		t, err := iptTokens(fam, r)
		if err != nil {
			return nil, fmt.Errorf("firewall: rule %d: %w", i, err)
		}
		out[i] = t
	}
	return out, nil
}

func ptrs(rules []Rule) []*Rule {
	out := make([]*Rule, len(rules))
	for i := range rules {
		out[i] = &rules[i]
	}
	return out
}

// sameCanon reports whether the saved rules are the wanted ones, in order.
func sameCanon(got []*iptRule, want [][]string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].canon != iptCanon(want[i]) {
			return false
		}
	}
	return true
}

func hasCanon(got []*iptRule, want []string) bool {
	c := iptCanon(want)
	return slices.ContainsFunc(got, func(r *iptRule) bool { return r.canon == c })
}

// add writes "-A CHAIN rule" (or "-I CHAIN 1 rule") to fwd and the rule's
// deletion to undo.
func addLine(fwd, undo *iptScript, chain string, first bool, toks []string) error {
	op := []string{"-A", chain}
	if first {
		op = []string{"-I", chain, "1"}
	}
	if err := fwd.line(append(op, toks...)...); err != nil {
		return err
	}
	return undo.line(append([]string{"-D", chain}, toks...)...)
}

// planIPT computes the restore input that makes st hold rs, and the input
// that undoes it (the rules it adds and the chains it creates).
func planIPT(st *iptState, rs *Ruleset) (fwd, undo *iptScript, err error) {
	table, err := iptTableOf(rs.Table)
	if err != nil {
		return nil, nil, err
	}
	fam := rs.Table.Family
	fwd, undo = &iptScript{table: table}, &iptScript{table: table}
	var undoChains []string
	for _, ch := range rs.Shared {
		if !ch.Name.ipt {
			return nil, nil, fmt.Errorf("firewall: %q is not an iptables chain name", ch.Name.s)
		}
		name := ch.Name.s
		created := false
		if !st.chains[name] {
			if ch.Hook != nil {
				return nil, nil, fmt.Errorf("%s table %s has no built-in chain %s", tool(fam, "save"), table, name)
			}
			fwd.declare(name)
			undoChains = append(undoChains, name)
			created = true
		}
		want, err := renderIPT(fam, ptrs(ch.Rules))
		if err != nil {
			return nil, nil, err
		}
		got := st.rules[name]
		switch ch.Mode {
		case Seed:
			if !created {
				continue
			}
		case Exactly:
			if sameCanon(got, want) {
				continue
			}
			if len(got) > 0 {
				if err := fwd.line("-F", name); err != nil {
					return nil, nil, err
				}
			}
		}
		for i, w := range want {
			if ch.Mode == Present && hasCanon(got, w) {
				continue
			}
			if err := addLine(fwd, undo, name, ch.Mode == Present && ch.Rules[i].First, w); err != nil {
				return nil, nil, err
			}
		}
	}
	for _, ch := range rs.Owned {
		if !ch.Name.ipt {
			return nil, nil, fmt.Errorf("firewall: %q is not an iptables chain name", ch.Name.s)
		}
		want, err := renderIPT(fam, ptrs(ch.Rules))
		if err != nil {
			return nil, nil, err
		}
		if st.chains[ch.Name.s] && sameCanon(st.rules[ch.Name.s], want) {
			continue
		}
		fwd.declare(ch.Name.s) // creates it, or flushes it under --noflush
		undoChains = append([]string{ch.Name.s}, undoChains...)
		for _, w := range want {
			if err := fwd.line(append([]string{"-A", ch.Name.s}, w...)...); err != nil {
				return nil, nil, err
			}
		}
	}
	for _, n := range rs.chainsOfRules() {
		rules := rs.rulesIn(n)
		want, err := renderIPT(fam, rules)
		if err != nil {
			return nil, nil, err
		}
		var old []*iptRule
		for _, r := range st.rules[n.s] {
			if rs.Owner.owns(r.comment()) {
				old = append(old, r)
			}
		}
		if sameCanon(old, want) {
			continue
		}
		for _, o := range old {
			if err := fwd.line(append([]string{"-D", n.s}, o.spec...)...); err != nil {
				return nil, nil, err
			}
		}
		for i, w := range want {
			if err := addLine(fwd, undo, n.s, rules[i].First, w); err != nil {
				return nil, nil, err
			}
		}
	}
	for _, c := range undoChains {
		if err := undo.line("-F", c); err != nil {
			return nil, nil, err
		}
	}
	for _, c := range undoChains {
		if err := undo.line("-X", c); err != nil {
			return nil, nil, err
		}
	}
	return fwd, undo, nil
}

func (b *iptBackend) Apply(rss ...*Ruleset) error {
	for _, rs := range rss {
		if err := rs.validate(); err != nil {
			return err
		}
		if rs.Table.Family == AnyFamily {
			return fmt.Errorf("firewall: an iptables ruleset needs a family")
		}
	}
	return WithLock(b.s.ctx, iptLock, func() error {
		type done struct {
			fam  Family
			undo *iptScript
		}
		var committed []done
		for _, rs := range rss {
			table, err := iptTableOf(rs.Table)
			if err != nil {
				return err
			}
			var undo *iptScript
			for i := 0; i < attempts; i++ {
				var st *iptState
				if st, err = iptSave(rs.Table.Family, table); err != nil {
					break
				}
				var fwd *iptScript
				if fwd, undo, err = planIPT(st, rs); err != nil || fwd.empty() {
					break
				}
				if err = iptRestore(rs.Table.Family, fwd); err == nil {
					break
				}
			}
			if err != nil {
				// All or nothing: take back what the earlier tables got.
				errs := []error{err}
				for j := len(committed) - 1; j >= 0; j-- {
					if uerr := iptRestore(committed[j].fam, committed[j].undo); uerr != nil {
						errs = append(errs, fmt.Errorf("undo: %w", uerr))
					}
				}
				return errors.Join(errs...)
			}
			if undo != nil && !undo.empty() {
				committed = append(committed, done{rs.Table.Family, undo})
			}
		}
		return nil
	})
}

func families(f Family) []Family {
	if f == AnyFamily {
		return []Family{IPv4, IPv6}
	}
	return []Family{f}
}

func (b *iptBackend) Remove(sel Selector) error {
	table, err := iptTableOf(sel.Table)
	if err != nil {
		return err
	}
	return WithLock(b.s.ctx, iptLock, func() error {
		var errs []error
		fams := families(sel.Table.Family)
		for _, fam := range fams {
			var err error
			for i := 0; i < attempts; i++ {
				var st *iptState
				if st, err = iptSave(fam, table); err != nil {
					break
				}
				var s *iptScript
				if s, err = planRemove(st, sel, table, fam); err != nil || s.empty() {
					break
				}
				if err = iptRestore(fam, s); err == nil {
					break
				}
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		// A family without ip(6)tables has nothing of ours.
		if len(errs) == len(fams) {
			return errors.Join(errs...)
		}
		return nil
	})
}

func planRemove(st *iptState, sel Selector, table string, fam Family) (*iptScript, error) {
	s := &iptScript{table: table}
	var in []string
	for _, n := range sel.In {
		in = append(in, n.s)
	}
	if len(in) == 0 {
		for n := range st.chains {
			in = append(in, n)
		}
		slices.Sort(in)
	}
	drop := map[string]bool{}
	var dropOrder []string
	dropChain := func(n string) {
		if st.chains[n] && !drop[n] {
			drop[n] = true
			dropOrder = append(dropOrder, n)
		}
	}
	for _, n := range sel.Chains {
		dropChain(n.s)
	}
	var selected []*iptRule
	for _, n := range in {
		for _, r := range st.rules[n] {
			if sel.Owner.owns(r.comment()) {
				selected = append(selected, r)
				if to := r.target(); sel.ChainPrefix != "" && strings.HasPrefix(to, sel.ChainPrefix) {
					dropChain(to)
				}
			}
		}
	}
	// Any rule still jumping to a dropped chain goes, or -X would fail.
	for _, rules := range st.rules {
		for _, r := range rules {
			if drop[r.target()] && !slices.Contains(selected, r) {
				selected = append(selected, r)
			}
		}
	}
	for i := range sel.Rules {
		r := &sel.Rules[i]
		if r.Family != AnyFamily && r.Family != fam {
			continue
		}
		toks, err := iptTokens(fam, r)
		if err != nil {
			return nil, fmt.Errorf("firewall: rule to remove from %s: %w", r.Chain, err)
		}
		c := iptCanon(toks)
		for _, g := range st.rules[r.Chain.s] {
			if g.canon == c && !slices.Contains(selected, g) {
				selected = append(selected, g)
			}
		}
	}
	if len(sel.Prune) > 0 {
		v := &iptView{st: st, fam: fam}
		for n := range st.chains {
			v.names = append(v.names, n)
		}
		slices.Sort(v.names)
		removed := map[ruleRef]bool{}
		for _, r := range selected {
			removed[ruleRef{r.chain, slices.Index(st.rules[r.chain], r)}] = true
		}
		dropOrder = append(dropOrder, planPrunes(v, sel.Prune, removed, drop)...)
		for ref := range removed {
			if r := st.rules[ref.chain][ref.i]; !slices.Contains(selected, r) {
				selected = append(selected, r)
			}
		}
	}
	for _, r := range selected {
		if drop[r.chain] {
			continue
		}
		if err := s.line(append([]string{"-D", r.chain}, r.spec...)...); err != nil {
			return nil, err
		}
	}
	for _, n := range dropOrder {
		if err := s.line("-F", n); err != nil {
			return nil, err
		}
	}
	for _, n := range dropOrder {
		if err := s.line("-X", n); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// iptView is an iptables-save table for planning prunes.
type iptView struct {
	st    *iptState
	fam   Family
	names []string
}

func (v *iptView) chainNames() []string       { return v.names }
func (v *iptView) ruleCount(chain string) int { return len(v.st.rules[chain]) }
func (v *iptView) targetOf(r ruleRef) string  { return v.st.rules[r.chain][r.i].target() }
func (v *iptView) deletable(chain string, hook *Hook) bool {
	return hook == nil && !v.st.builtin[chain]
}
func (v *iptView) equal(r ruleRef, want *Rule) bool {
	if want.Family != AnyFamily && want.Family != v.fam {
		return false
	}
	toks, err := iptTokens(v.fam, want)
	return err == nil && v.st.rules[r.chain][r.i].canon == iptCanon(toks)
}

func (b *iptBackend) Check(rs *Ruleset) error {
	if err := rs.validate(); err != nil {
		return err
	}
	table, err := iptTableOf(rs.Table)
	if err != nil {
		return err
	}
	fam := rs.Table.Family
	st, err := iptSave(fam, table)
	if err != nil {
		return err
	}
	where := func(chain string) string { return fmt.Sprintf("%s table %s chain %s", tool(fam, "save"), table, chain) }
	for _, ch := range append(slices.Clone(rs.Shared), rs.Owned...) {
		if !st.chains[ch.Name.s] {
			return fmt.Errorf("%s is missing", where(ch.Name.s))
		}
	}
	for _, ch := range rs.Shared {
		want, err := renderIPT(fam, ptrs(ch.Rules))
		if err != nil {
			return err
		}
		switch ch.Mode {
		case Exactly:
			if !sameCanon(st.rules[ch.Name.s], want) {
				return fmt.Errorf("%s does not hold exactly its %d rules", where(ch.Name.s), len(want))
			}
		case Present:
			for _, w := range want {
				if !hasCanon(st.rules[ch.Name.s], w) {
					return fmt.Errorf("%s lacks the rule %q", where(ch.Name.s), strings.Join(w, " "))
				}
			}
		}
	}
	diff := func(chain string, got []*iptRule, want [][]string) error {
		if len(got) != len(want) {
			return fmt.Errorf("%s has %d of this attachment's rules, expected %d", where(chain), len(got), len(want))
		}
		for i := range want {
			if got[i].canon != iptCanon(want[i]) {
				return fmt.Errorf("%s: rule %d is %q, expected %q", where(chain), i, strings.Join(got[i].spec, " "), strings.Join(want[i], " "))
			}
		}
		return nil
	}
	for _, ch := range rs.Owned {
		want, err := renderIPT(fam, ptrs(ch.Rules))
		if err != nil {
			return err
		}
		if err := diff(ch.Name.s, st.rules[ch.Name.s], want); err != nil {
			return err
		}
	}
	for _, n := range rs.chainsOfRules() {
		want, err := renderIPT(fam, rs.rulesIn(n))
		if err != nil {
			return err
		}
		var got []*iptRule
		for _, r := range st.rules[n.s] {
			if rs.Owner.owns(r.comment()) {
				got = append(got, r)
			}
		}
		if err := diff(n.s, got, want); err != nil {
			return err
		}
	}
	return nil
}
