package masq

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/spec"
)

const (
	tableName  = "cni_plugins_masquerade"
	checkChain = "masq_checks"
	postChain  = "postrouting"
)

var table = &nftables.Table{Name: tableName, Family: nftables.TableFamilyINet}

// conn opens an nftables connection bound to the calling thread's network
// namespace (plugins and tests run inside netns.Do on a locked thread).
func conn() (*nftables.Conn, func(), error) {
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, nil, fmt.Errorf("open current network namespace: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())), nftables.AsLasting())
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open nftables connection: %w", err)
	}
	return c, func() { c.CloseLasting(); f.Close() }, nil
}

// rulesWithPrefix lists masq_checks rules whose comment starts with prefix;
// a missing table or chain means none.
func rulesWithPrefix(c *nftables.Conn, prefix string) ([]*nftables.Rule, error) {
	rules, err := c.GetRules(table, &nftables.Chain{Name: checkChain, Table: table})
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("list nftables rules of %s %s: %w", tableName, checkChain, err)
	}
	var out []*nftables.Rule
	for _, r := range rules {
		if cm, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok && strings.HasPrefix(cm, prefix) {
			out = append(out, r)
		}
	}
	return out, nil
}

// chainsOf names the chains of tbl that exist (none when tbl does not).
func chainsOf(c *nftables.Conn, tbl *nftables.Table) (map[string]bool, error) {
	chains, err := c.ListChainsOfTableFamily(tbl.Family)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("list nftables chains: %w", err)
	}
	present := map[string]bool{}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == tbl.Name {
			present[ch.Name] = true
		}
	}
	return present, nil
}

// sameExprs reports whether the rules are exactly want, in order.
func sameExprs(rules []*nftables.Rule, want [][]expr.Any) bool {
	if len(rules) != len(want) {
		return false
	}
	for i, r := range rules {
		if !reflect.DeepEqual(r.Exprs, want[i]) {
			return false
		}
	}
	return true
}

func setupNFT(ips []netip.Prefix, k Key) error {
	c, done, err := conn()
	if err != nil {
		return err
	}
	defer done()
	stale, err := rulesWithPrefix(c, instanceHash(k))
	if err != nil {
		return err
	}
	// Only what is missing or wrong is written: re-adding existing chains or
	// rebuilding postrouting would queue RCU-deferred frees that the socket
	// close then waits for (~10 ms per ADD).
	checks := &nftables.Chain{Name: checkChain, Table: table}
	post := &nftables.Chain{
		Name: postChain, Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	}
	// postrouting: multicast returns, everything else goes to masq_checks
	// (the reference's layout).
	mc4, mc6 := netip.MustParsePrefix("224.0.0.0/4"), netip.MustParsePrefix("ff00::/8")
	wantPost := [][]expr.Any{
		append(daddrIn(mc4, expr.CmpOpEq), &expr.Verdict{Kind: expr.VerdictReturn}),
		append(daddrIn(mc6, expr.CmpOpEq), &expr.Verdict{Kind: expr.VerdictReturn}),
		{&expr.Verdict{Kind: expr.VerdictGoto, Chain: checkChain}},
	}
	present, err := chainsOf(c, table)
	if err != nil {
		return err
	}
	if len(present) == 0 {
		c.AddTable(table)
	}
	if !present[checkChain] {
		c.AddChain(checks)
	}
	postOK := false
	if present[postChain] {
		got, err := c.GetRules(table, post)
		if err != nil {
			return fmt.Errorf("list nftables rules of %s %s: %w", tableName, postChain, err)
		}
		postOK = sameExprs(got, wantPost)
		if !postOK {
			c.FlushChain(post)
		}
	} else {
		c.AddChain(post)
	}
	if !postOK {
		for _, ex := range wantPost {
			c.AddRule(&nftables.Rule{Table: table, Chain: post, Exprs: ex})
		}
	}
	for _, r := range stale {
		if err := c.DelRule(r); err != nil {
			return fmt.Errorf("remove stale masquerade rule: %w", err)
		}
	}
	ud := userdata.AppendString(nil, userdata.TypeComment, comment(k))
	for _, p := range ips {
		// ip saddr == <addr> ip daddr != <subnet> masquerade
		ex := saddrIs(p.Addr())
		ex = append(ex, daddrIn(p.Masked(), expr.CmpOpNeq)[2:]...)
		ex = append(ex, &expr.Masq{})
		c.AddRule(&nftables.Rule{Table: table, Chain: checks, Exprs: ex, UserData: ud})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install nftables masquerade rules: %w", err)
	}
	return nil
}

func teardownNFT(k Key) error {
	c, done, err := conn()
	if err != nil {
		return err
	}
	defer done()
	rules, err := rulesWithPrefix(c, instanceHash(k))
	if err != nil || len(rules) == 0 {
		return err
	}
	for _, r := range rules {
		if err := c.DelRule(r); err != nil {
			return fmt.Errorf("remove masquerade rule: %w", err)
		}
	}
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove nftables masquerade rules: %w", err)
	}
	return nil
}

func gcNFT(network string, valid []spec.Attachment) error {
	c, done, err := conn()
	if err != nil {
		return err
	}
	defer done()
	rules, err := rulesWithPrefix(c, networkHash(network))
	if err != nil || len(rules) == 0 {
		return err
	}
	keep := map[string]bool{}
	for _, a := range valid {
		keep[comment(Key{Network: network, IfName: a.IfName, ContainerID: a.ContainerID})] = true
	}
	n := 0
	for _, r := range rules {
		if cm, _ := userdata.GetString(r.UserData, userdata.TypeComment); !keep[cm] {
			if err := c.DelRule(r); err != nil {
				return err
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return c.Flush()
}

// l3 matches the address family in an inet table and loads an address
// field of the network header into register 1.
func l3(a netip.Addr, v4Off, v6Off uint32) []expr.Any {
	proto, off, n := byte(unix.NFPROTO_IPV4), v4Off, uint32(4)
	if !a.Is4() {
		proto, off, n = unix.NFPROTO_IPV6, v6Off, 16
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
	}
}

// saddrIs: ip(6) saddr == a.
func saddrIs(a netip.Addr) []expr.Any {
	return append(l3(a, 12, 8), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()})
}

// daddrIn: ip(6) daddr (==|!=) p. The first two expressions are the
// family match, which callers that already matched it drop.
func daddrIn(p netip.Prefix, op expr.CmpOp) []expr.Any {
	a := p.Addr()
	ex := l3(a, 16, 24)
	if p.Bits() < a.BitLen() {
		mask := net.CIDRMask(p.Bits(), a.BitLen())
		ex = append(ex, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(mask)), Mask: mask, Xor: make([]byte, len(mask))})
	}
	return append(ex, &expr.Cmp{Op: op, Register: 1, Data: p.Masked().Addr().AsSlice()})
}
