package portmap

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
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
const (
	nftTable      = "patchbay_portmap"
	nftPrerouting = "prerouting"
	nftOutput     = "output"
	nftHostports  = "hostports"
	nftMasq       = "masquerade"
)

type nftBackend struct{}

var (
	tbl       = &nftables.Table{Name: nftTable, Family: nftables.TableFamilyINet}
	chPre     = &nftables.Chain{Name: nftPrerouting, Table: tbl, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest}
	chOut     = &nftables.Chain{Name: nftOutput, Table: tbl, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest}
	chPorts   = &nftables.Chain{Name: nftHostports, Table: tbl}
	chMasq    = &nftables.Chain{Name: nftMasq, Table: tbl, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource}
	keyChains = []*nftables.Chain{chPorts, chMasq}
)

func comment(key string) []byte { return userdata.AppendString(nil, userdata.TypeComment, key) }

func ruleKey(r *nftables.Rule) string {
	s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
	return s
}

// expected returns this attachment's rules, by chain.
func (b *nftBackend) expected(r *request) (ports, masq []*nftables.Rule, err error) {
	ud := comment(r.Key)
	for _, fam := range []struct {
		cont  bool
		v6    bool
		conds []string
	}{{r.ContV4.IsValid(), false, r.CondV4}, {r.ContV6.IsValid(), true, r.CondV6}} {
		if !fam.cont {
			continue
		}
		cont, subnet := r.ContV4, r.Net4
		if fam.v6 {
			cont, subnet = r.ContV6, r.Net6
		}
		conds, err := parseNftConditions(fam.conds, fam.v6)
		if err != nil {
			return nil, nil, err
		}
		for _, m := range r.Mappings {
			if !m.forFamily(fam.v6) {
				continue
			}
			ex := append(nfproto(fam.v6), conds...)
			if d, ok := m.daddr(); ok {
				ex = append(ex, matchAddr(false, d, -1, false)...)
			}
			ex = append(ex, matchPort(m.Proto, m.HostPort)...)
			ex = append(ex, dnat(cont, m.ContainerPort)...)
			ports = append(ports, &nftables.Rule{Table: tbl, Chain: chPorts, Exprs: ex, UserData: ud})
		}
		if !r.SNAT {
			continue
		}
		if r.MasqAll {
			// Every connection DNATed to the container is masqueraded.
			ex := append(nfproto(fam.v6), matchAddr(false, cont, -1, false)...)
			ex = append(ex, ctDNAT()...)
			masq = append(masq, &nftables.Rule{Table: tbl, Chain: chMasq, Exprs: append(ex, masquerade()...), UserData: ud})
			continue
		}
		// Hairpin: the container, or a peer on its subnet, reaching the
		// container through a host port.
		ex := append(nfproto(fam.v6), matchAddr(true, cont, subnet.Bits(), false)...)
		ex = append(ex, matchAddr(false, cont, -1, false)...)
		ex = append(ex, ctDNAT()...)
		masq = append(masq, &nftables.Rule{Table: tbl, Chain: chMasq, Exprs: append(ex, masquerade()...), UserData: ud})
		if !fam.v6 {
			// The host's own 127.0.0.1 reaching the container.
			ex := append(nfproto(false), matchAddr(true, loopback4, -1, false)...)
			ex = append(ex, matchAddr(false, cont, -1, false)...)
			masq = append(masq, &nftables.Rule{Table: tbl, Chain: chMasq, Exprs: append(ex, masquerade()...), UserData: ud})
		}
	}
	return ports, masq, nil
}

// attempts bounds the retries of a transaction that lost a race (a rule
// listed for deletion was deleted meanwhile by a concurrent call).
const attempts = 3

func (b *nftBackend) Add(r *request) error {
	ports, masq, err := b.expected(r)
	if err != nil {
		return err
	}
	for i := 1; ; i++ {
		err := b.addOnce(r, append(ports, masq...))
		if err == nil || i == attempts {
			return err
		}
	}
}

func (b *nftBackend) addOnce(r *request, rules []*nftables.Rule) error {
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return fmt.Errorf("open nftables: %w", err)
	}
	defer c.CloseLasting()
	present, err := b.presentChains(c)
	if err != nil {
		return err
	}
	// A repeated ADD of the same attachment replaces its rules.
	old, err := b.ownedIn(c, present, func(k string) bool { return k == r.Key })
	if err != nil {
		return err
	}
	// Only what is missing or wrong is (re)written. Re-adding an existing
	// chain or rewriting the entry rules would queue kernel objects for
	// RCU-deferred release, and closing the socket then waits a grace period
	// (~10 ms): ADD of a further attachment must only add rules.
	if len(present) == 0 { // no table, or a table without our chains
		c.AddTable(tbl)
	}
	for _, ch := range []*nftables.Chain{chPorts, chPre, chOut, chMasq} {
		if !present[ch.Name] {
			c.AddChain(ch)
		}
	}
	for _, ch := range []*nftables.Chain{chPre, chOut} {
		ok := false
		if present[ch.Name] {
			if ok, err = b.hasOnlyEntryRule(c, ch); err != nil {
				return err
			}
			if !ok {
				c.FlushChain(ch)
			}
		}
		if !ok {
			c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: jumpIfLocal()})
		}
	}
	for _, o := range old {
		if err := c.DelRule(o); err != nil {
			return err
		}
	}
	for _, rl := range rules {
		c.AddRule(rl)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("program nftables table inet %s: %w", nftTable, err)
	}
	return nil
}

// hasOnlyEntryRule reports whether an entry chain holds exactly the one
// jump rule it should.
func (b *nftBackend) hasOnlyEntryRule(c *nftables.Conn, ch *nftables.Chain) (bool, error) {
	rules, err := c.GetRules(tbl, ch)
	if err != nil {
		return false, fmt.Errorf("list rules of inet %s %s: %w", nftTable, ch.Name, err)
	}
	return len(rules) == 1 && reflect.DeepEqual(rules[0].Exprs, jumpIfLocal()), nil
}

// owned lists the rules of the key chains whose key matches; a missing
// table or chain simply has none.
func (b *nftBackend) owned(c *nftables.Conn, match func(string) bool) ([]*nftables.Rule, error) {
	present, err := b.presentChains(c)
	if err != nil {
		return nil, err
	}
	return b.ownedIn(c, present, match)
}

// ownedIn is owned with the chain listing already done.
func (b *nftBackend) ownedIn(c *nftables.Conn, present map[string]bool, match func(string) bool) ([]*nftables.Rule, error) {
	var out []*nftables.Rule
	for _, ch := range keyChains {
		if !present[ch.Name] {
			continue
		}
		rules, err := c.GetRules(tbl, ch)
		if err != nil {
			return nil, fmt.Errorf("list rules of inet %s %s: %w", nftTable, ch.Name, err)
		}
		for _, rl := range rules {
			if match(ruleKey(rl)) {
				out = append(out, rl)
			}
		}
	}
	return out, nil
}

// presentChains dumps the inet chains once: it tells both whether our table
// exists and which of its chains do, without relying on error strings.
func (b *nftBackend) presentChains(c *nftables.Conn) (map[string]bool, error) {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("list nftables chains: %w", err)
	}
	present := map[string]bool{}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == nftTable {
			present[ch.Name] = true
		}
	}
	return present, nil
}

func (b *nftBackend) remove(match func(string) bool) error {
	for i := 1; ; i++ {
		err := b.removeOnce(match)
		if err == nil || i == attempts {
			return err
		}
	}
}

func (b *nftBackend) removeOnce(match func(string) bool) error {
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return fmt.Errorf("open nftables: %w", err)
	}
	defer c.CloseLasting()
	rules, err := b.owned(c, match)
	if err != nil || len(rules) == 0 {
		return err
	}
	for _, rl := range rules {
		if err := c.DelRule(rl); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("delete nftables rules: %w", err)
	}
	return nil
}

func (b *nftBackend) Del(r *request) error {
	return b.remove(func(k string) bool { return k == r.Key })
}

func (b *nftBackend) GC(prefix string, valid map[string]bool) error {
	return b.remove(func(k string) bool {
		return len(k) > len(prefix) && k[:len(prefix)] == prefix && !valid[k]
	})
}

func (b *nftBackend) Check(r *request) error {
	ports, masq, err := b.expected(r)
	if err != nil {
		return err
	}
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return fmt.Errorf("open nftables: %w", err)
	}
	defer c.CloseLasting()
	present, err := b.presentChains(c)
	if err != nil {
		return err
	}
	for _, ch := range []*nftables.Chain{chPre, chOut, chPorts, chMasq} {
		if !present[ch.Name] {
			return fmt.Errorf("nftables chain inet %s %s is missing", nftTable, ch.Name)
		}
	}
	for _, ch := range []*nftables.Chain{chPre, chOut} {
		if err := b.expectRules(c, ch, []*nftables.Rule{{Exprs: jumpIfLocal()}}, func(*nftables.Rule) bool { return true }); err != nil {
			return err
		}
	}
	mine := func(rl *nftables.Rule) bool { return ruleKey(rl) == r.Key }
	if err := b.expectRules(c, chPorts, ports, mine); err != nil {
		return err
	}
	return b.expectRules(c, chMasq, masq, mine)
}

// expectRules checks that the chain's rules selected by mine are exactly want.
func (b *nftBackend) expectRules(c *nftables.Conn, ch *nftables.Chain, want []*nftables.Rule, mine func(*nftables.Rule) bool) error {
	rules, err := c.GetRules(tbl, ch)
	if err != nil {
		return fmt.Errorf("list rules of inet %s %s: %w", nftTable, ch.Name, err)
	}
	var got []*nftables.Rule
	for _, rl := range rules {
		if mine(rl) {
			got = append(got, rl)
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("chain inet %s %s has %d of this attachment's rules, expected %d", nftTable, ch.Name, len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i].Exprs, want[i].Exprs) {
			return fmt.Errorf("chain inet %s %s: rule %d differs from the expected one: %s", nftTable, ch.Name, i, exprDiff(got[i].Exprs, want[i].Exprs))
		}
	}
	return nil
}

// exprDiff names the first differing expression, for CHECK's error.
func exprDiff(got, want []expr.Any) string {
	for i := 0; i < len(got) && i < len(want); i++ {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("expression %d is %#v, expected %#v", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d expressions, expected %d", len(got), len(want))
}
