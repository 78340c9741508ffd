package firewall

import (
	"errors"
	"fmt"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// Kind is a rule-programming backend.
type Kind string

const (
	NFTables Kind = "nftables"
	IPTables Kind = "iptables"
)

// ParseKind validates a backend key's value (ipMasqBackend, portmap's
// backend): "" means def.
func ParseKind(key, value string, def Kind) (Kind, error) {
	switch Kind(value) {
	case "":
		return def, nil
	case NFTables, IPTables:
		return Kind(value), nil
	}
	return "", spec.Errorf(spec.ErrInvalidNetworkConfig, "%q value %q is invalid: must be %q or %q", key, value, NFTables, IPTables)
}

// Table names a table. NFT tables have an nftables family (inet, ip, ip6,
// bridge); an iptables table ("nat", "filter") exists once per IP family:
// Family picks iptables (IPv4) or ip6tables (IPv6), AnyFamily both (for
// Remove).
type Table struct {
	Kind   Kind
	Name   Name
	Family Family
	// NFTFamily is the nftables table family ("inet", "ip", "ip6", "bridge").
	NFTFamily string
}

func (t Table) String() string {
	if t.Kind == NFTables {
		return t.NFTFamily + " " + t.Name.s
	}
	return t.Family.String() + " " + t.Name.s
}

// Hook makes a chain a base chain (nftables). iptables' built-in chains
// carry a Hook too (their name is the hook); the iptables backend creates
// no base chains.
type Hook struct {
	Type     string // "nat", "filter", "route"
	Hook     string // "prerouting", "input", "forward", "output", "postrouting"
	Priority int
	// Policy "drop" or "" (accept).
	Policy string
}

// Mode says how a shared chain's Rules are kept.
type Mode uint8

const (
	// Present (the zero Mode): each of Rules must be in the chain (added,
	// or inserted first with Rule.First, when missing); other rules are
	// left alone.
	Present Mode = iota
	// Exactly: the chain must hold exactly Rules, in order; otherwise it is
	// flushed and rewritten (entry chains that jump elsewhere).
	Exactly
	// Seed: Rules are written when the chain is created, never after (a
	// chain whose content the first user decides).
	Seed
)

// Chain is a chain of a Ruleset.
type Chain struct {
	Name  Name
	Hook  *Hook
	Mode  Mode
	Rules []Rule
}

// Owner selects rules by their comment: equal to Exact, or starting with
// Prefix; comments in Keep, and comments starting with one of
// KeepPrefixes, are never selected (GC keeps valid attachments: by the
// tag their comments start with where they have one, which still matches
// when the rest of the comment was cut or worded otherwise).
type Owner struct {
	Exact        string
	Prefix       string
	Keep         map[string]bool
	KeepPrefixes []string
}

func (o Owner) owns(comment string) bool {
	if o.Keep[comment] {
		return false
	}
	for _, p := range o.KeepPrefixes {
		if strings.HasPrefix(comment, p) {
			return false
		}
	}
	if o.Exact != "" {
		return comment == o.Exact
	}
	return o.Prefix != "" && strings.HasPrefix(comment, o.Prefix)
}

// Ruleset is what one owner (an attachment) needs in one table: shared
// chains (made when missing, kept per their Mode), chains of its own, and
// its rules in shared chains, each tagged with a comment Owner selects.
type Ruleset struct {
	Table  Table
	Owner  Owner
	Shared []*Chain
	// Owned chains are created, rewritten when their rules differ, and
	// removed with the owner.
	Owned []*Chain
	// Rules go into shared chains (Rule.Chain); each must carry a comment
	// that Owner selects, which is how Remove finds it again.
	Rules []Rule
	// Search lists further shared chains that may hold the owner's rules
	// from an earlier Apply (they are replaced too).
	Search []Name
}

// Selector picks what Remove deletes from a table: the rules Owner selects
// in the chains In (every chain of the table if In is empty), the chains
// in Chains, and the chains that a selected rule jumps to whose name
// starts with ChainPrefix. Any rule still jumping to a chain being removed
// is removed too.
type Selector struct {
	Table       Table
	Owner       Owner
	In          []Name
	Chains      []Name
	ChainPrefix string
	// Rules are removed from their Rule.Chain wherever an equal rule is
	// there (every copy): rules that carry no owner's comment, such as the
	// reference firewall plugin's per-address rules. In an iptables table
	// of one family, rules of the other family are skipped.
	Rules []Rule
	// Prune lists shared chains to delete if, after the above, nothing
	// needs them (see Prune).
	Prune []Prune
	// DropEmptyTable deletes an nftables table all of whose chains are
	// being deleted (with whatever else it holds); iptables tables are
	// built in and stay.
	DropEmptyTable bool
}

// Backend programs rulesets in one kind of kernel firewall. A Backend comes
// from a Session and shares its connection.
type Backend interface {
	Kind() Kind
	// Apply makes the kernel hold every ruleset: missing tables, chains and
	// rules are created, the owner's rules are replaced where they differ,
	// and nothing that is already right is written. All or nothing: one
	// transaction for nftables; for iptables one restore per table and
	// family, the ones already committed undone if a later one fails (the
	// undo removes what they added; an owner's older rules that they
	// replaced are not put back).
	Apply(rs ...*Ruleset) error
	// Check reports the first way in which the kernel differs from rs.
	Check(rs *Ruleset) error
	// Remove deletes what sel selects; missing tables and chains are fine.
	Remove(sel Selector) error
}

// attempts is the one retry policy: a write that lost a race with another
// writer (a rule listed for deletion is gone, a chain appeared, replies
// were lost) is planned again from a fresh read, at most this many times
// in all.
const attempts = 3

// validate checks a ruleset's shape before anything is read or written.
func (rs *Ruleset) validate() error {
	if rs.Owner.Exact == "" && rs.Owner.Prefix == "" {
		return errors.New("firewall: a ruleset needs an owner")
	}
	for _, r := range rs.Rules {
		if r.Chain.IsZero() {
			return errors.New("firewall: a ruleset rule names no chain")
		}
		if !rs.Owner.owns(r.Comment.s) {
			return fmt.Errorf("firewall: rule comment %q is not selected by its owner", r.Comment.s)
		}
	}
	return nil
}

// chainsOfRules are the shared chains holding the owner's rules (those
// with rules in rs.Rules and those in rs.Search), in order, once each.
func (rs *Ruleset) chainsOfRules() []Name {
	var out []Name
	seen := map[string]bool{}
	add := func(n Name) {
		if !seen[n.s] {
			seen[n.s] = true
			out = append(out, n)
		}
	}
	for _, r := range rs.Rules {
		add(r.Chain)
	}
	for _, n := range rs.Search {
		add(n)
	}
	return out
}

// rulesIn are the owner's rules for one chain, in order.
func (rs *Ruleset) rulesIn(chain Name) []*Rule {
	var out []*Rule
	for i := range rs.Rules {
		if rs.Rules[i].Chain == chain {
			out = append(out, &rs.Rules[i])
		}
	}
	return out
}

// DryRun renders rulesets as backend k would write them, without touching
// the kernel: for iptables the restore lines, for nftables one line per
// rule naming its chain and expression count. Tests and fuzzers use it to
// check that every value that passed validation renders.
func DryRun(k Kind, rss ...*Ruleset) ([]string, error) {
	var out []string
	for _, rs := range rss {
		if err := rs.validate(); err != nil {
			return nil, err
		}
		if k == IPTables {
			empty := &iptState{chains: map[string]bool{}, rules: map[string][]*iptRule{}}
			for _, ch := range rs.Shared {
				if ch.Hook != nil {
					empty.chains[ch.Name.s] = true // built-in chains exist
				}
			}
			fwd, undo, err := planIPT(empty, rs)
			if err != nil {
				return nil, err
			}
			out = append(out, strings.Split(strings.TrimSuffix(fwd.String()+undo.String(), "\n"), "\n")...)
			continue
		}
		t, err := nftTable(rs.Table)
		if err != nil {
			return nil, err
		}
		var all []Rule
		for _, ch := range append(append([]*Chain{}, rs.Shared...), rs.Owned...) {
			all = append(all, ch.Rules...)
		}
		all = append(all, rs.Rules...)
		for i := range all {
			ex, err := nftExprs(t.Family, &all[i])
			if err != nil {
				return nil, err
			}
			out = append(out, fmt.Sprintf("%s: %d expressions", all[i].Chain, len(ex)))
		}
	}
	return out, nil
}
