package firewall

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Syntax is the language conditions are written in.
type Syntax uint8

const (
	NoSyntax Syntax = iota
	IPTablesSyntax
	NFTablesSyntax
)

// ConditionsSyntax tells iptables conditions ("-s ...", "! -d ...") from
// nftables ones ("ip saddr ...") by the first character, as the reference
// portmap does; no conditions have no syntax.
func ConditionsSyntax(elems []string) Syntax {
	if len(elems) == 0 || elems[0] == "" {
		return NoSyntax
	}
	if c := elems[0][0]; c == '-' || c == '!' {
		return IPTablesSyntax
	}
	return NFTablesSyntax
}

// The grammars conditions are checked against. The reference passes
// conditions to iptables or nft unparsed; we program the kernel from typed
// matches, so a condition is accepted only if it parses completely into
// matches of this package. Anything else is refused with code 7.
const (
	// IPTablesGrammar: one token per array element, or several separated by
	// spaces. "!" negates the option after it. ADDR is an address or
	// prefix of the family of the key (conditionsV4: IPv4); IFACE an
	// interface name, "+" at the end for a prefix.
	IPTablesGrammar = `[!] -s|--source ADDR, [!] -d|--destination ADDR, [!] -i|--in-interface IFACE, [!] -o|--out-interface IFACE, [!] -p|--protocol tcp|udp|sctp|icmp|icmpv6, -m addrtype [!] --src-type|--dst-type TYPE, -m iprange [!] --src-range|--dst-range ADDR-ADDR, -m mark [!] --mark VALUE[/MASK], -m conntrack [!] --ctstate STATE[,STATE...]`
	// NFTablesGrammar: the elements are joined with spaces. OP is "==" or
	// "!="; NAME may be double-quoted, "*" at the end for a prefix.
	NFTablesGrammar = `ip|ip6 saddr|daddr [OP] ADDR, [meta] iifname|oifname [OP] NAME`
)

// addrTypes are the route types addrtype knows.
var addrTypes = []string{"UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST", "BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE"}

// ctStates are the conntrack states --ctstate knows (SNAT/DNAT are status
// bits, not states: refused).
var ctStates = []string{"INVALID", "NEW", "ESTABLISHED", "RELATED", "UNTRACKED"}

// ParseConditions parses conditions written in either syntax into matches
// for a rule of family fam. key names the configuration key in errors.
func ParseConditions(key string, elems []string, fam Family) ([]Match, Syntax, error) {
	for i, e := range elems {
		if !printable(e) {
			return nil, NoSyntax, Invalid(fmt.Sprintf("%s[%d]", key, i), e, "a condition must be non-empty printable ASCII without control characters")
		}
	}
	syn := ConditionsSyntax(elems)
	var toks []string
	for _, e := range elems {
		toks = append(toks, strings.Fields(e)...)
	}
	p := &condParser{key: key, joined: strings.Join(elems, " "), toks: toks, fam: fam}
	var m []Match
	var err error
	switch syn {
	case IPTablesSyntax:
		m, err = p.iptables()
	case NFTablesSyntax:
		m, err = p.nftables()
	}
	return m, syn, err
}

type condParser struct {
	key, joined string
	toks        []string
	i           int
	fam         Family
}

func (p *condParser) fail(why string, grammar string) error {
	return Invalid(p.key, p.joined, why+" (accepted: "+grammar+")")
}

func (p *condParser) more() bool { return p.i < len(p.toks) }

func (p *condParser) next() string {
	t := p.toks[p.i]
	p.i++
	return t
}

// prefix parses ADDR or ADDR/LEN of the parser's family.
func (p *condParser) prefix(s string) (netip.Prefix, bool) {
	if pf, err := netip.ParsePrefix(s); err == nil && pf.Addr().Zone() == "" {
		pf = netip.PrefixFrom(pf.Addr().Unmap(), pf.Bits())
		if pf.Addr().Is4() && pf.Bits() > 32 {
			return netip.Prefix{}, false
		}
		return pf.Masked(), FamilyOf(pf.Addr()) == p.fam
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), FamilyOf(a) == p.fam
}

func (p *condParser) iptables() ([]Match, error) {
	const g = IPTablesGrammar
	var out []Match
	module, moduleOpts := "", 0
	endModule := func() error {
		if module != "" && moduleOpts == 0 {
			return p.fail(fmt.Sprintf("\"-m %s\" has no option", module), g)
		}
		module, moduleOpts = "", 0
		return nil
	}
	for p.more() {
		neg := false
		if p.toks[p.i] == "!" {
			neg = true
			p.i++
			if !p.more() {
				return nil, p.fail("\"!\" at the end", g)
			}
		}
		opt := p.next()
		val := func() (string, error) {
			if !p.more() || p.toks[p.i] == "!" || strings.HasPrefix(p.toks[p.i], "-") {
				return "", p.fail(fmt.Sprintf("%q needs a value", opt), g)
			}
			return p.next(), nil
		}
		inModule := func(m string) error {
			if module != m {
				return p.fail(fmt.Sprintf("%q belongs after \"-m %s\"", opt, m), g)
			}
			moduleOpts++
			return nil
		}
		switch opt {
		case "-s", "--source", "--src", "-d", "--destination", "--dst":
			if err := endModule(); err != nil {
				return nil, err
			}
			v, err := val()
			if err != nil {
				return nil, err
			}
			pf, ok := p.prefix(v)
			if !ok {
				return nil, p.fail(fmt.Sprintf("%q is not an %s address or prefix", v, p.fam), g)
			}
			out = append(out, Addr{Dst: opt[1] == 'd' || strings.HasPrefix(opt, "--d"), Prefix: pf, Not: neg})
		case "-i", "--in-interface", "-o", "--out-interface":
			if err := endModule(); err != nil {
				return nil, err
			}
			v, err := val()
			if err != nil {
				return nil, err
			}
			n, err := ParseIfName(p.key, v, '+')
			if err != nil {
				return nil, p.fail(fmt.Sprintf("%q is not an interface name", v), g)
			}
			out = append(out, Iface{Out: opt == "-o" || opt == "--out-interface", Name: n, Not: neg})
		case "-p", "--protocol":
			if err := endModule(); err != nil {
				return nil, err
			}
			v, err := val()
			if err != nil {
				return nil, err
			}
			pr, ok := p.proto(v)
			if !ok {
				return nil, p.fail(fmt.Sprintf("protocol %q is not one of tcp, udp, sctp, icmp (IPv4), icmpv6 (IPv6)", v), g)
			}
			out = append(out, L4{Proto: pr, Not: neg})
		case "-m", "--match":
			if err := endModule(); err != nil {
				return nil, err
			}
			if neg {
				return nil, p.fail("\"!\" cannot negate \"-m\"", g)
			}
			v, err := val()
			if err != nil {
				return nil, err
			}
			switch v {
			case "addrtype", "iprange", "mark", "conntrack":
				module = v
			default:
				return nil, p.fail(fmt.Sprintf("match module %q is not supported", v), g)
			}
		case "--src-type", "--dst-type":
			if err := inModule("addrtype"); err != nil {
				return nil, err
			}
			v, err := val()
			if err != nil {
				return nil, err
			}
			if !slices.Contains(addrTypes, v) {
				return nil, p.fail(fmt.Sprintf("address type %q is not one of %s (one type per option)", v, strings.Join(addrTypes, ", ")), g)
			}
			out = append(out, AddrType{Dst: opt == "--dst-type", Type: v, Not: neg})
		case "--src-range", "--dst-range":
			if err := inModule("iprange"); err != nil {
				return nil, err
			}
			v, err := val()
			if err != nil {
				return nil, err
			}
			from, to, ok := strings.Cut(v, "-")
			a, errA := netip.ParseAddr(from)
			b, errB := netip.ParseAddr(to)
			if !ok || errA != nil || errB != nil || a.Zone() != "" || b.Zone() != "" {
				return nil, p.fail(fmt.Sprintf("%q is not an address range FROM-TO", v), g)
			}
			a, b = a.Unmap(), b.Unmap()
			if FamilyOf(a) != p.fam || FamilyOf(b) != p.fam || b.Less(a) {
				return nil, p.fail(fmt.Sprintf("%q is not an ascending %s address range", v, p.fam), g)
			}
			out = append(out, AddrRange{Dst: opt == "--dst-range", From: a, To: b, Not: neg})
		case "--mark":
			if err := inModule("mark"); err != nil {
				return nil, err
			}
			v, err := val()
			if err != nil {
				return nil, err
			}
			m, ok := parseMark(v)
			if !ok {
				return nil, p.fail(fmt.Sprintf("mark %q is not VALUE[/MASK] of 32-bit numbers", v), g)
			}
			out = append(out, MarkMatch{Mark: m, Not: neg})
		case "--ctstate":
			if err := inModule("conntrack"); err != nil {
				return nil, err
			}
			v, err := val()
			if err != nil {
				return nil, err
			}
			var states []string
			for _, s := range strings.Split(v, ",") {
				if !slices.Contains(ctStates, s) {
					return nil, p.fail(fmt.Sprintf("conntrack state %q is not one of %s", s, strings.Join(ctStates, ", ")), g)
				}
				if !slices.Contains(states, s) {
					states = append(states, s)
				}
			}
			out = append(out, CtState{States: states, Not: neg})
		default:
			return nil, p.fail(fmt.Sprintf("option %q is not supported", opt), g)
		}
	}
	if err := endModule(); err != nil {
		return nil, err
	}
	return out, nil
}

func (p *condParser) proto(v string) (Proto, bool) {
	switch strings.ToLower(v) {
	case "tcp":
		return TCP, true
	case "udp":
		return UDP, true
	case "sctp":
		return SCTP, true
	case "icmp":
		return ICMP, p.fam == IPv4
	case "icmpv6", "ipv6-icmp":
		return ICMPv6, p.fam == IPv6
	}
	return Proto{}, false
}

// parseMark reads VALUE[/MASK] (decimal or 0x hex); no mask means all bits.
func parseMark(s string) (Mark, bool) {
	v, m, hasMask := strings.Cut(s, "/")
	val, err := strconv.ParseUint(v, 0, 32)
	if err != nil {
		return Mark{}, false
	}
	mask := uint64(0xffffffff)
	if hasMask {
		if mask, err = strconv.ParseUint(m, 0, 32); err != nil {
			return Mark{}, false
		}
	}
	return Mark{Value: uint32(val), Mask: uint32(mask)}, true
}

func (p *condParser) nftables() ([]Match, error) {
	const g = NFTablesGrammar
	var out []Match
	for p.more() {
		t := p.next()
		if t == "meta" && p.more() {
			t = p.next()
		}
		neg := false
		op := func() {
			if p.more() && (p.toks[p.i] == "!=" || p.toks[p.i] == "==") {
				neg = p.next() == "!="
			}
		}
		switch t {
		case "ip", "ip6":
			if (t == "ip6") != (p.fam == IPv6) {
				return nil, p.fail(fmt.Sprintf("%q is for the other address family", t), g)
			}
			if !p.more() || (p.toks[p.i] != "saddr" && p.toks[p.i] != "daddr") {
				return nil, p.fail("expected saddr or daddr after "+t, g)
			}
			dst := p.next() == "daddr"
			op()
			if !p.more() {
				return nil, p.fail("missing address", g)
			}
			v := p.next()
			pf, ok := p.prefix(v)
			if !ok {
				return nil, p.fail(fmt.Sprintf("%q is not an %s address or prefix", v, p.fam), g)
			}
			out = append(out, Addr{Dst: dst, Prefix: pf, Not: neg})
		case "iifname", "oifname":
			op()
			if !p.more() {
				return nil, p.fail("missing interface name", g)
			}
			v := p.next()
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			n, err := ParseIfName(p.key, v, '*')
			if err != nil {
				return nil, p.fail(fmt.Sprintf("%q is not an interface name", v), g)
			}
			out = append(out, Iface{Out: t == "oifname", Name: n, Not: neg})
		default:
			return nil, p.fail(fmt.Sprintf("unknown match %q", t), g)
		}
	}
	return out, nil
}
