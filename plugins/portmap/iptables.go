package portmap

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The iptables layout (nat table, for iptables and ip6tables alike), close
// to the reference's so that operators recognise it:
//
//	PREROUTING, OUTPUT: -m addrtype --dst-type LOCAL -j PB-HOSTPORT-DNAT
//	PB-HOSTPORT-DNAT:   -m comment --comment KEY -p P -m multiport --dports ... -j PB-DN-<hash(KEY)>
//	PB-DN-<hash>:       per mapping: mark hairpin (-s subnet) and localhost
//	                    (-s 127.0.0.1, IPv4) for masquerade, then DNAT
//	PB-HOSTPORT-SETMARK: -j MARK --set-xmark BIT/BIT (or externalSetMarkChain)
//	POSTROUTING (first): -j PB-HOSTPORT-MASQ
//	PB-HOSTPORT-MASQ:   -m mark --mark BIT/BIT -j MASQUERADE
//
// The per-attachment chain is named by a hash of the key and its entry rule
// carries the key as a comment, so DEL removes exactly its own chain and
// entries, and GC can read keys back. All changes of one call go through a
// single iptables-restore --noflush per family, under a file lock (a
// ":CHAIN" line flushes an existing chain, so creating shared chains must
// not race).
const (
	iptDNAT    = "PB-HOSTPORT-DNAT"
	iptSetMark = "PB-HOSTPORT-SETMARK"
	iptMasq    = "PB-HOSTPORT-MASQ"
	iptPerPfx  = "PB-DN-"
	iptLock    = "/run/patchbay-portmap-iptables.lock"
)

type iptBackend struct{}

func iptChain(key string) string { return iptPerPfx + strings.ToUpper(shortHash(key, 16)) }

// iptState is what iptables-save says of the nat table.
type iptState struct {
	chains map[string]bool
	rules  [][]string // tokenised "-A CHAIN ..." lines
}

func (s *iptState) rulesOf(chain string) [][]string {
	var out [][]string
	for _, r := range s.rules {
		if len(r) > 1 && r[1] == chain {
			out = append(out, r)
		}
	}
	return out
}

func tool(v6 bool, what string) string {
	if v6 {
		return "ip6tables-" + what
	}
	return "iptables-" + what
}

func iptSave(v6 bool) (*iptState, error) {
	cmd := exec.Command(tool(v6, "save"), "-t", "nat")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t nat: %v: %s", tool(v6, "save"), err, strings.TrimSpace(stderr.String()))
	}
	st := &iptState{chains: map[string]bool{}}
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, ":"):
			if name, _, ok := strings.Cut(line[1:], " "); ok {
				st.chains[name] = true
			}
		case strings.HasPrefix(line, "-A "):
			st.rules = append(st.rules, splitRule(line))
		}
	}
	return st, nil
}

func iptRestore(v6 bool, script string) error {
	cmd := exec.Command(tool(v6, "restore"), "--noflush", "-w")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s\ninput:\n%s", tool(v6, "restore"), err, strings.TrimSpace(string(out)), script)
	}
	return nil
}

// withLock serialises our read-modify-write of the nat table.
func withLock(f func() error) error {
	fd, err := unix.Open(iptLock, unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", iptLock, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", iptLock, err)
	}
	return f()
}

// splitRule tokenises an iptables-save line (double quotes, backslash escapes).
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

// joinRule quotes tokens for iptables-restore.
func joinRule(toks []string) string {
	parts := make([]string, len(toks))
	for i, t := range toks {
		if t == "" || strings.ContainsAny(t, " \t\"'\\") {
			t = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(t) + `"`
		}
		parts[i] = t
	}
	return strings.Join(parts, " ")
}

func ruleTarget(r []string) string {
	for i := 0; i+1 < len(r); i++ {
		if r[i] == "-j" || r[i] == "-g" {
			return r[i+1]
		}
	}
	return ""
}

func ruleComment(r []string) string {
	for i := 0; i+1 < len(r); i++ {
		if r[i] == "--comment" {
			return r[i+1]
		}
	}
	return ""
}

func markDef(bit int) string {
	v := uint32(1) << uint(bit)
	return fmt.Sprintf("%#x/%#x", v, v)
}

// script collects restore lines; chain declarations go first.
type script struct{ chains, lines []string }

func (s *script) chain(name string)  { s.chains = append(s.chains, ":"+name+" - [0:0]") }
func (s *script) add(toks ...string) { s.lines = append(s.lines, joinRule(toks)) }
func (s *script) empty() bool        { return len(s.chains)+len(s.lines) == 0 }
func (s *script) String() string {
	return "*nat\n" + strings.Join(append(s.chains, s.lines...), "\n") + "\nCOMMIT\n"
}

func (b *iptBackend) Add(r *request) error {
	return withLock(func() error {
		for _, v6 := range []bool{false, true} {
			if (v6 && !r.ContV6.IsValid()) || (!v6 && !r.ContV4.IsValid()) {
				continue
			}
			st, err := iptSave(v6)
			if err != nil {
				return err
			}
			s := &script{}
			b.ensureShared(st, r, s)
			b.removeEntries(st, func(rule []string) bool { return ruleTarget(rule) == iptChain(r.Key) }, s)
			b.attachment(r, v6, s)
			if err := iptRestore(v6, s.String()); err != nil {
				return err
			}
		}
		return nil
	})
}

// ensureShared creates the shared chains and entry rules that are missing.
func (b *iptBackend) ensureShared(st *iptState, r *request, s *script) {
	newChain := func(name string, rules ...[]string) {
		if st.chains[name] {
			return
		}
		s.chain(name)
		for _, rl := range rules {
			s.add(append([]string{"-A", name}, rl...)...)
		}
	}
	hasJump := func(chain, target string) bool {
		for _, rl := range st.rulesOf(chain) {
			if ruleTarget(rl) == target {
				return true
			}
		}
		return false
	}
	if r.SNAT && !r.ExternalMark {
		newChain(iptSetMark, []string{"-m", "comment", "--comment", "patchbay portmap masquerade mark", "-j", "MARK", "--set-xmark", markDef(r.MarkBit)})
		newChain(iptMasq, []string{"-m", "mark", "--mark", markDef(r.MarkBit), "-j", "MASQUERADE"})
		if !hasJump("POSTROUTING", iptMasq) {
			// First, so that the masquerade is not pre-empted by other
			// plugins' POSTROUTING rules.
			s.add("-I", "POSTROUTING", "1", "-m", "comment", "--comment", "patchbay portmap requiring masquerade", "-j", iptMasq)
		}
	}
	newChain(iptDNAT)
	for _, ch := range []string{"PREROUTING", "OUTPUT"} {
		if !hasJump(ch, iptDNAT) {
			s.add("-A", ch, "-m", "addrtype", "--dst-type", "LOCAL", "-j", iptDNAT)
		}
	}
}

// removeEntries deletes the PB-HOSTPORT-DNAT entry rules selected by match.
func (b *iptBackend) removeEntries(st *iptState, match func([]string) bool, s *script) {
	for _, rl := range st.rulesOf(iptDNAT) {
		if match(rl) {
			s.add(append([]string{"-D"}, rl[1:]...)...)
		}
	}
}

// attachment (re)creates the per-attachment chain and its entry rules.
func (b *iptBackend) attachment(r *request, v6 bool, s *script) {
	chain := iptChain(r.Key)
	cont, subnet, conds := r.ContV4, r.Net4, r.CondV4
	if v6 {
		cont, subnet, conds = r.ContV6, r.Net6, r.CondV6
	}
	s.chain(chain) // creates or flushes
	setMark := iptSetMark
	if r.ExternalMark {
		setMark = r.SetMarkChain
	}
	ports := map[string][]string{}
	for _, m := range r.Mappings {
		if !m.forFamily(v6) {
			continue
		}
		hp := strconv.Itoa(int(m.HostPort))
		ports[m.Proto] = append(ports[m.Proto], hp)
		base := []string{"-A", chain, "-p", m.Proto, "-m", m.Proto, "--dport", hp}
		if d, ok := m.daddr(); ok {
			base = append(base, "-d", d.String())
		}
		if r.SNAT {
			src := subnet.Masked().String()
			if r.MasqAll {
				src = "0.0.0.0/0"
				if v6 {
					src = "::/0"
				}
			}
			s.add(append(base, "-s", src, "-j", setMark)...)
			if !v6 && !r.MasqAll {
				s.add(append(base, "-s", "127.0.0.1", "-j", setMark)...)
			}
		}
		s.add(append(base, "-j", "DNAT", "--to-destination", netip.AddrPortFrom(cont, m.ContainerPort).String())...)
	}
	protos := make([]string, 0, len(ports))
	for p := range ports {
		protos = append(protos, p)
	}
	sort.Strings(protos)
	for _, p := range protos {
		// multiport takes at most 15 ports per rule.
		for list := ports[p]; len(list) > 0; {
			n := min(len(list), 15)
			rule := []string{"-A", iptDNAT, "-m", "comment", "--comment", r.Key, "-p", p, "-m", "multiport", "--dports", strings.Join(list[:n], ",")}
			rule = append(rule, conds...)
			s.add(append(rule, "-j", chain)...)
			list = list[n:]
		}
	}
}

// remove deletes, in each family, the entries selected by match and the
// chains they jump to; missing tables, chains and a family without
// ip(6)tables support are tolerated.
func (b *iptBackend) remove(match func([]string) bool, extraChains []string) error {
	return withLock(func() error {
		var errs []error
		for _, v6 := range []bool{false, true} {
			st, err := iptSave(v6)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			s := &script{}
			chains := map[string]bool{}
			for _, c := range extraChains {
				if st.chains[c] {
					chains[c] = true
				}
			}
			for _, rl := range st.rulesOf(iptDNAT) {
				if match(rl) {
					if t := ruleTarget(rl); strings.HasPrefix(t, iptPerPfx) && st.chains[t] {
						chains[t] = true
					}
				}
			}
			b.removeEntries(st, match, s)
			names := make([]string, 0, len(chains))
			for c := range chains {
				names = append(names, c)
			}
			sort.Strings(names)
			for _, c := range names {
				s.add("-F", c)
			}
			for _, c := range names {
				s.add("-X", c)
			}
			if s.empty() {
				continue
			}
			if err := iptRestore(v6, s.String()); err != nil {
				return err
			}
		}
		if len(errs) == 2 {
			return fmt.Errorf("neither iptables nor ip6tables is usable: %v; %v", errs[0], errs[1])
		}
		return nil
	})
}

func (b *iptBackend) Del(r *request) error {
	chain := iptChain(r.Key)
	return b.remove(func(rl []string) bool { return ruleTarget(rl) == chain }, []string{chain})
}

func (b *iptBackend) GC(prefix string, valid map[string]bool) error {
	return b.remove(func(rl []string) bool {
		k := ruleComment(rl)
		return strings.HasPrefix(k, prefix) && !valid[k]
	}, nil)
}

func (b *iptBackend) Check(r *request) error {
	chain := iptChain(r.Key)
	for _, v6 := range []bool{false, true} {
		cont := r.ContV4
		if v6 {
			cont = r.ContV6
		}
		if !cont.IsValid() {
			continue
		}
		st, err := iptSave(v6)
		if err != nil {
			return err
		}
		if !st.chains[chain] {
			return fmt.Errorf("%s: chain %s is missing", tool(v6, "save"), chain)
		}
		entries := 0
		for _, rl := range st.rulesOf(iptDNAT) {
			if ruleTarget(rl) == chain {
				entries++
			}
		}
		if entries == 0 {
			return fmt.Errorf("%s: no %s rule jumps to %s", tool(v6, "save"), iptDNAT, chain)
		}
		want := map[string]int{}
		for _, m := range r.Mappings {
			if m.forFamily(v6) {
				want[netip.AddrPortFrom(cont, m.ContainerPort).String()]++
			}
		}
		for _, rl := range st.rulesOf(chain) {
			for i := 0; i+1 < len(rl); i++ {
				if rl[i] == "--to-destination" {
					want[rl[i+1]]--
				}
			}
		}
		for dst, n := range want {
			if n > 0 {
				return fmt.Errorf("%s: chain %s lacks the DNAT rule to %s", tool(v6, "save"), chain, dst)
			}
		}
	}
	return nil
}
