package firewall

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The iptables renderer turns a Rule into iptables-restore tokens. Every
// token comes from a typed value; the script writer still refuses any
// token with a control character and quotes the rest, so no value can end
// a line or start another option.

func iptTokens(fam Family, r *Rule) ([]string, error) {
	var out []string
	// The comment first: iptables-save prints modules in the order given,
	// and a comment in front is what operators (and our tests) look for.
	if !r.Comment.IsZero() {
		out = append(out, "-m", "comment", "--comment", r.Comment.s)
	}
	for _, m := range r.Match {
		t, err := iptMatch(fam, m)
		if err != nil {
			return nil, err
		}
		out = append(out, t...)
	}
	v, err := iptVerdict(r.Verdict)
	if err != nil {
		return nil, err
	}
	return append(out, v...), nil
}

func not(neg bool, toks ...string) []string {
	if neg {
		return append([]string{"!"}, toks...)
	}
	return toks
}

func iptMatch(fam Family, m Match) ([]string, error) {
	switch m := m.(type) {
	case Addr:
		if FamilyOf(m.Prefix.Addr()) != fam {
			return nil, fmt.Errorf("address match %s in an %s table", m.Prefix, fam)
		}
		opt := "-s"
		if m.Dst {
			opt = "-d"
		}
		return not(m.Not, opt, m.Prefix.Masked().String()), nil
	case AddrRange:
		if FamilyOf(m.From) != fam {
			return nil, fmt.Errorf("address range in an %s table", fam)
		}
		opt := "--src-range"
		if m.Dst {
			opt = "--dst-range"
		}
		return append([]string{"-m", "iprange"}, not(m.Not, opt, m.From.String()+"-"+m.To.String())...), nil
	case Iface:
		opt := "-i"
		if m.Out {
			opt = "-o"
		}
		n := m.Name.s
		if m.Name.prefix {
			n += "+"
		}
		return not(m.Not, opt, n), nil
	case L4:
		return not(m.Not, "-p", m.Proto.Name), nil
	case DPort:
		return []string{"-p", m.Proto.Name, "-m", m.Proto.Name, "--dport", strconv.Itoa(int(m.Port))}, nil
	case DPorts:
		if len(m.Ports) == 0 || len(m.Ports) > 15 {
			return nil, fmt.Errorf("multiport takes 1 to 15 ports, not %d", len(m.Ports))
		}
		ps := make([]string, len(m.Ports))
		for i, p := range m.Ports {
			ps[i] = strconv.Itoa(int(p))
		}
		return []string{"-p", m.Proto.Name, "-m", "multiport", "--dports", strings.Join(ps, ",")}, nil
	case AddrType:
		opt := "--src-type"
		if m.Dst {
			opt = "--dst-type"
		}
		return append([]string{"-m", "addrtype"}, not(m.Not, opt, m.Type)...), nil
	case MarkMatch:
		return append([]string{"-m", "mark"}, not(m.Not, "--mark", m.Mark.String())...), nil
	case CtState:
		return append([]string{"-m", "conntrack"}, not(m.Not, "--ctstate", strings.Join(m.States, ","))...), nil
	case CtDNAT:
		return []string{"-m", "conntrack", "--ctstate", "DNAT"}, nil
	case EtherSrc:
		return []string{"-m", "mac", "--mac-source", m.MAC.String()}, nil
	}
	return nil, fmt.Errorf("match %T is not supported by the iptables backend", m)
}

func iptVerdict(v Verdict) ([]string, error) {
	switch v := v.(type) {
	case Accept:
		return []string{"-j", "ACCEPT"}, nil
	case Drop:
		return []string{"-j", "DROP"}, nil
	case Return:
		return []string{"-j", "RETURN"}, nil
	case Masquerade:
		return []string{"-j", "MASQUERADE"}, nil
	case Jump:
		if !v.Chain.ipt {
			return nil, fmt.Errorf("%q is not an iptables chain name", v.Chain.s)
		}
		return []string{"-j", v.Chain.s}, nil
	case Goto:
		if !v.Chain.ipt {
			return nil, fmt.Errorf("%q is not an iptables chain name", v.Chain.s)
		}
		return []string{"-g", v.Chain.s}, nil
	case DNAT:
		return []string{"-j", "DNAT", "--to-destination", v.To.String()}, nil
	case SetMark:
		return []string{"-j", "MARK", "--set-xmark", v.Mark.String()}, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("verdict %T is not supported by the iptables backend", v)
}

// iptScript is an iptables-restore input for one table. Chain
// declarations go first (":NAME" creates a chain, or flushes an existing
// one under --noflush), then the rule lines in order.
type iptScript struct {
	table       string
	decl, lines []string
}

func (s *iptScript) empty() bool { return len(s.decl)+len(s.lines) == 0 }

func (s *iptScript) declare(chain string) { s.decl = append(s.decl, ":"+chain+" - [0:0]") }

// line adds one command (e.g. "-A", chain, rule tokens...). Every token must
// be printable ASCII: a token from iptables-save that is not (a rule
// someone else made with a control character in it) is refused here
// rather than written.
func (s *iptScript) line(toks ...string) error {
	parts := make([]string, len(toks))
	for i, t := range toks {
		if !printable(t) {
			return fmt.Errorf("refusing to write iptables token %q: not printable ASCII", t)
		}
		if strings.ContainsAny(t, " \"'\\") {
			t = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(t) + `"`
		}
		parts[i] = t
	}
	s.lines = append(s.lines, strings.Join(parts, " "))
	return nil
}

func (s *iptScript) String() string {
	return "*" + s.table + "\n" + strings.Join(append(slices.Clone(s.decl), s.lines...), "\n") + "\nCOMMIT\n"
}

// iptRule is a rule read back from iptables-save.
type iptRule struct {
	chain string
	spec  []string // the tokens after "-A CHAIN"
	canon string
}

func (r *iptRule) comment() string {
	for i := 0; i+1 < len(r.spec); i++ {
		if r.spec[i] == "--comment" {
			return r.spec[i+1]
		}
	}
	return ""
}

func (r *iptRule) target() string {
	for i := 0; i+1 < len(r.spec); i++ {
		if r.spec[i] == "-j" || r.spec[i] == "-g" {
			return r.spec[i+1]
		}
	}
	return ""
}

// iptState is what iptables-save printed for one table.
type iptState struct {
	chains map[string]bool
	rules  map[string][]*iptRule
	// builtin chains have a policy ("ACCEPT", "DROP"), user chains "-".
	builtin map[string]bool
}

func parseIPTSave(out string) *iptState {
	st := &iptState{chains: map[string]bool{}, rules: map[string][]*iptRule{}, builtin: map[string]bool{}}
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, ":"):
			if name, rest, ok := strings.Cut(line[1:], " "); ok {
				st.chains[name] = true
				st.builtin[name] = !strings.HasPrefix(rest, "- ")
			}
		case strings.HasPrefix(line, "-A "):
			toks := splitRule(line)
			if len(toks) < 2 {
				continue
			}
			r := &iptRule{chain: toks[1], spec: toks[2:]}
			r.canon = iptCanon(r.spec)
			st.rules[r.chain] = append(st.rules[r.chain], r)
		}
	}
	return st
}

// splitRule tokenises an iptables-save line (double quotes, backslash
// escapes), as iptables-restore reads it.
func splitRule(line string) []string {
	var out []string
	var cur strings.Builder
	inQ, have := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			have = true
		case c == '"':
			inQ, have = !inQ, true
		case c == ' ' && !inQ:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// iptCanon is a rule's spec in a form that does not depend on how it was
// written: iptables-save prints options in its own order, adds "/32" to
// addresses, drops the mask of a full mark... Options (with "!" and their
// values, normalised) are sorted; "-m MODULE" is implied by its options.
func iptCanon(spec []string) string {
	var groups []string
	for i := 0; i < len(spec); {
		g := []string{}
		if spec[i] == "!" {
			g = append(g, "!")
			i++
			if i == len(spec) {
				break
			}
		}
		opt := spec[i]
		i++
		var args []string
		for i < len(spec) && spec[i] != "!" && !(strings.HasPrefix(spec[i], "-") && len(spec[i]) > 1) {
			args = append(args, spec[i])
			i++
		}
		if opt == "-m" || opt == "--match" {
			continue
		}
		opt = canonOpt(opt)
		for j, a := range args {
			args[j] = canonArg(opt, a)
		}
		g = append(g, opt)
		g = append(g, args...)
		groups = append(groups, strings.Join(g, " "))
	}
	slices.Sort(groups)
	return strings.Join(groups, "\x00")
}

func canonOpt(opt string) string {
	switch opt {
	case "--source", "--src":
		return "-s"
	case "--destination", "--dst":
		return "-d"
	case "--in-interface":
		return "-i"
	case "--out-interface":
		return "-o"
	case "--protocol":
		return "-p"
	case "--jump":
		return "-j"
	case "--goto":
		return "-g"
	}
	return opt
}

func canonArg(opt, a string) string {
	switch opt {
	case "-s", "-d":
		if p, err := netip.ParsePrefix(a); err == nil {
			return p.Masked().String()
		}
		if ad, err := netip.ParseAddr(a); err == nil {
			return netip.PrefixFrom(ad, ad.BitLen()).String()
		}
	case "--mark", "--set-xmark":
		if m, ok := parseMark(a); ok {
			return m.String()
		}
	case "--ctstate", "--ctstatus":
		l := strings.Split(a, ",")
		slices.Sort(l)
		return strings.Join(l, ",")
	case "-p":
		return strings.ToLower(a)
	}
	return a
}
