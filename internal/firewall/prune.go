package firewall

import "slices"

// Prune deletes a shared chain once nothing needs it any more: after what
// the Selector removes, the chain holds only Idle rules (scaffolding of its
// own, such as a final RETURN or the jump to an admin chain), and the only
// rules leading to it are From rules (each in its Rule.Chain), which go
// with it. Anything else keeps the chain: a rule someone added to it, a
// jump to it from elsewhere, or it being a built-in chain. Prunes are
// considered in order, each seeing the earlier ones done, so a chain that
// only an earlier pruned chain led to can go too.
//
// Hook says what the chain was made as (nil: a regular chain; else the
// base chain of that hook): a chain of the name that is something else was
// not made by the caller and stays. Built-in iptables chains never go.
//
// This is how the firewall plugin leaves the rule set as it found it when
// its last attachment goes, without ever deleting a chain an operator or
// another program still uses.
type Prune struct {
	Chain Name
	Hook  *Hook
	Idle  []Rule
	From  []Rule
}

// ruleRef is one rule read back from the kernel: its chain and position.
type ruleRef struct {
	chain string
	i     int
}

// tableView is a table as a backend read it, for planning prunes
// independently of the backend.
type tableView interface {
	// chainNames lists the table's chains, sorted.
	chainNames() []string
	// ruleCount is the number of rules in a chain.
	ruleCount(chain string) int
	// targetOf is the chain a rule jumps or goes to ("" for none).
	targetOf(r ruleRef) string
	// equal reports whether a rule is want, rendered by this backend
	// (false for a rule that does not render in this table).
	equal(r ruleRef, want *Rule) bool
	// deletable reports whether a chain can be deleted and is what hook
	// says (a base chain of that hook, or a regular chain for nil).
	deletable(chain string, hook *Hook) bool
}

// planPrunes decides which of prunes go, given the rules already being
// removed and the chains already being dropped (both updated in place);
// it returns the pruned chains in order.
func planPrunes(v tableView, prunes []Prune, removed map[ruleRef]bool, dropped map[string]bool) []string {
	var out []string
	matchesAny := func(r ruleRef, want []Rule) bool {
		for i := range want {
			if want[i].Chain.IsZero() || want[i].Chain.s == r.chain {
				if v.equal(r, &want[i]) {
					return true
				}
			}
		}
		return false
	}
	for _, p := range prunes {
		name := p.Chain.s
		if dropped[name] || !slices.Contains(v.chainNames(), name) {
			continue
		}
		// The Idle rules of a chain name no chain: they are in it.
		idle := slices.Clone(p.Idle)
		for i := range idle {
			idle[i].Chain = p.Chain
		}
		busy := false
		for i := 0; i < v.ruleCount(name) && !busy; i++ {
			r := ruleRef{name, i}
			busy = !removed[r] && !matchesAny(r, idle)
		}
		var from []ruleRef
		for _, c := range v.chainNames() {
			if busy || dropped[c] || c == name {
				continue
			}
			for i := 0; i < v.ruleCount(c); i++ {
				r := ruleRef{c, i}
				if removed[r] || v.targetOf(r) != name {
					continue
				}
				if !matchesAny(r, p.From) {
					busy = true
					break
				}
				from = append(from, r)
			}
		}
		if busy || !v.deletable(name, p.Hook) {
			continue
		}
		dropped[name] = true
		for _, r := range from {
			removed[r] = true
		}
		out = append(out, name)
	}
	return out
}
