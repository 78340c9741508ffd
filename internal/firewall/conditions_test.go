package firewall

import (
	"reflect"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

func TestParseConditions(t *testing.T) {
	for _, tc := range []struct {
		elems []string
		fam   Family
		syn   Syntax
		n     int // matches
	}{
		{[]string{"-s", "10.0.0.0/8"}, IPv4, IPTablesSyntax, 1},
		{[]string{"! -d 192.0.2.1", "-i", "eth+"}, IPv4, IPTablesSyntax, 2},
		{[]string{"--source", "2001:db8::/32", "-o", "veth0"}, IPv6, IPTablesSyntax, 2},
		{[]string{"-p", "icmp"}, IPv4, IPTablesSyntax, 1},
		{[]string{"-m", "addrtype", "!", "--src-type", "LOCAL", "--dst-type", "UNICAST"}, IPv4, IPTablesSyntax, 2},
		{[]string{"-m", "iprange", "--src-range", "10.0.0.1-10.0.0.9"}, IPv4, IPTablesSyntax, 1},
		{[]string{"-m", "mark", "!", "--mark", "0x10/0xf0", "-m", "conntrack", "--ctstate", "NEW,ESTABLISHED"}, IPv4, IPTablesSyntax, 2},
		{[]string{"ip saddr 10.0.0.0/8"}, IPv4, NFTablesSyntax, 1},
		{[]string{"ip", "daddr", "!=", "192.0.2.1"}, IPv4, NFTablesSyntax, 1},
		{[]string{"iifname eth0", `meta oifname != "eth1"`, "iifname veth*"}, IPv4, NFTablesSyntax, 3},
		{[]string{"ip6 saddr 2001:db8::1"}, IPv6, NFTablesSyntax, 1},
		{nil, IPv4, NoSyntax, 0},
	} {
		m, syn, err := ParseConditions("conditions", tc.elems, tc.fam)
		if err != nil || syn != tc.syn || len(m) != tc.n {
			t.Errorf("%q: got %d matches, syntax %d, %v; want %d, %d", tc.elems, len(m), syn, err, tc.n, tc.syn)
		}
	}
	for _, bad := range []struct {
		elems []string
		fam   Family
		want  string
	}{
		{[]string{"-s", "10.0.0.0/8\nCOMMIT"}, IPv4, "conditions[1]"},
		{[]string{"-s\t10.0.0.0/8"}, IPv4, "control characters"},
		{[]string{""}, IPv4, "non-empty"},
		{[]string{"-j", "DROP"}, IPv4, `option "-j" is not supported`},
		{[]string{"-s", "-j"}, IPv4, `"-s" needs a value`},
		{[]string{"-s"}, IPv4, `"-s" needs a value`},
		{[]string{"-s", "2001:db8::1"}, IPv4, "is not an IPv4 address"},
		{[]string{"-s", "10.0.0.0/33"}, IPv4, "is not an IPv4 address"},
		{[]string{"-s", "fe80::1%eth0"}, IPv6, "is not an IPv6 address"},
		{[]string{"!"}, IPv4, `"!" at the end`},
		{[]string{"!", "-m", "mark", "--mark", "1"}, IPv4, `cannot negate "-m"`},
		{[]string{"-m", "mark"}, IPv4, `"-m mark" has no option`},
		{[]string{"-m", "mark", "-s", "1.2.3.4"}, IPv4, `"-m mark" has no option`},
		{[]string{"--mark", "1"}, IPv4, `belongs after "-m mark"`},
		{[]string{"-m", "comment", "--comment", "x"}, IPv4, `module "comment" is not supported`},
		{[]string{"-m", "mark", "--mark", "0x100000000"}, IPv4, "32-bit"},
		{[]string{"-m", "iprange", "--src-range", "10.0.0.9-10.0.0.1"}, IPv4, "ascending"},
		{[]string{"-m", "conntrack", "--ctstate", "NEW,DNAT"}, IPv4, `state "DNAT"`},
		{[]string{"-m", "addrtype", "--src-type", "LOCAL,UNICAST"}, IPv4, "one type per option"},
		{[]string{"-i", "eth0/1"}, IPv4, "not an interface name"},
		{[]string{"-i", "0123456789abcdef"}, IPv4, "not an interface name"},
		{[]string{"-p", "icmp"}, IPv6, `protocol "icmp"`},
		{[]string{"tcp flags syn"}, IPv4, `unknown match "tcp"`},
		{[]string{"ip saddr"}, IPv4, "missing address"},
		{[]string{"ip foo 1.2.3.4"}, IPv4, "expected saddr or daddr"},
		{[]string{"ip saddr 2001:db8::1"}, IPv4, "is not an IPv4 address"},
		{[]string{"ip6 saddr ::1"}, IPv4, "other address family"},
		{[]string{"iifname eth*x"}, IPv4, "not an interface name"},
		{[]string{`iifname "eth0\" drop"`}, IPv4, "not an interface name"},
		{[]string{"counter"}, IPv4, `unknown match "counter"`},
	} {
		_, _, err := ParseConditions("conditions", bad.elems, bad.fam)
		var se *spec.Error
		if err == nil {
			t.Errorf("%q accepted", bad.elems)
			continue
		}
		if !asSpecError(err, &se) || se.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(se.Msg, bad.want) {
			t.Errorf("%q: got %v, want code 7 containing %q", bad.elems, err, bad.want)
		}
	}
}

func asSpecError(err error, se **spec.Error) bool {
	e, ok := err.(*spec.Error)
	*se = e
	return ok
}

// Accepted conditions render to iptables tokens that parse back to the
// same matches: the renderer writes exactly what the grammar read.
func TestConditionsRoundTrip(t *testing.T) {
	for _, c := range []struct {
		elems []string
		fam   Family
	}{
		{[]string{"! -s 10.0.0.0/8", "-o", "eth+", "-p", "udp"}, IPv4},
		{[]string{"-m", "addrtype", "!", "--dst-type", "LOCAL", "-m", "iprange", "--dst-range", "2001:db8::1-2001:db8::9"}, IPv6},
		{[]string{"-m", "mark", "--mark", "7", "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED"}, IPv4},
		{[]string{"ip daddr != 192.0.2.0/24", "oifname veth*"}, IPv4},
	} {
		roundTrip(t, c.elems, c.fam)
	}
}

func roundTrip(t *testing.T, elems []string, fam Family) {
	t.Helper()
	m, _, err := ParseConditions("c", elems, fam)
	if err != nil {
		return
	}
	toks, err := iptTokens(fam, &Rule{Match: m})
	if err != nil {
		t.Fatalf("%q: render: %v", elems, err)
	}
	if len(toks) == 0 && len(m) == 0 {
		return
	}
	back, syn, err := ParseConditions("c", toks, fam)
	if err != nil || syn != IPTablesSyntax {
		t.Fatalf("%q rendered as %q, which does not parse: %v", elems, toks, err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Fatalf("%q rendered as %q parses to %#v, not %#v", elems, toks, back, m)
	}
	s := &iptScript{table: "nat"}
	if err := s.line(append([]string{"-A", "X"}, toks...)...); err != nil {
		t.Fatalf("%q: %v", elems, err)
	}
	if strings.Count(s.String(), "\n") != 3 {
		t.Fatalf("%q: the script is not one line per rule:\n%s", elems, s)
	}
	if _, err := nftExprs(0, &Rule{Family: fam, Match: m}); err != nil {
		t.Fatalf("%q: nftables render: %v", elems, err)
	}
}

// FuzzConditions: the conditions parser never panics; whatever it accepts
// renders in both backends, parses back from its iptables form to the
// same matches, and makes exactly one iptables-restore line.
func FuzzConditions(f *testing.F) {
	for _, s := range []string{
		"-s\x1f10.0.0.0/8", "-s\x1f10.0.0.0/8\nCOMMIT\n*filter\n-I\x1fINPUT\x1f-j\x1fDROP\nCOMMIT\n*nat",
		"! -d 192.0.2.1\x1f-i\x1feth+", "-m\x1faddrtype\x1f!\x1f--src-type\x1fLOCAL", "-m iprange --src-range 10.0.0.1-10.0.0.9",
		"-m\x1fmark\x1f--mark\x1f0x10/0xf0\x1f-m\x1fconntrack\x1f--ctstate\x1fNEW,ESTABLISHED", "-j\x1fACCEPT", "-g INPUT",
		"ip saddr 10.0.0.0/8", "iifname \"eth0\"\x1fmeta oifname != veth*", "ip6 saddr 2001:db8::1", "ip saddr 10.0.0.1\ncounter",
		"-p\x1ficmpv6", "-s 10.0.0.0/8\r", "--src 1.2.3.4 --dst ::ffff:1.2.3.4",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, joined string, v6 bool) {
		fam := IPv4
		if v6 {
			fam = IPv6
		}
		elems := strings.Split(joined, "\x1f") // the unit separator splits array elements
		m, _, err := ParseConditions("c", elems, fam)
		if err != nil {
			var se *spec.Error
			if !asSpecError(err, &se) || se.Code != spec.ErrInvalidNetworkConfig {
				t.Fatalf("%q: refused without code 7: %v", elems, err)
			}
			return
		}
		for _, x := range m {
			if a, ok := x.(Addr); ok && FamilyOf(a.Prefix.Addr()) != fam {
				t.Fatalf("%q: %s accepted in an %s condition", elems, a.Prefix, fam)
			}
		}
		roundTrip(t, elems, fam)
	})
}
