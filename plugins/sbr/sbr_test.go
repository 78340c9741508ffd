package sbr

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// What ADD leaves for eth0 (10.1.1.2/24, fd00:1::2/64): one table per
// address from 100 on, rules at the kernel's next free priority, the
// interface's routes moved out of the main table.
var wantAfterAdd = []string{
	"-4 rule: 32765:	from 10.1.1.2 lookup 100",
	"-6 rule: 32765:	from fd00:1::2 lookup 101",
	"-4 route: default via 10.1.1.1 dev eth0 table 100",
	"-4 route: 10.1.1.0/24 dev eth0 table 100 proto kernel scope link src 10.1.1.2",
	"-4 route: 10.2.0.0/24 via 10.1.1.5 dev eth0 table 100",
	"-6 route: default via fd00:1::1 dev eth0 table 101 metric 1024 pref medium",
	"-6 route: fd00:1::/64 dev eth0 table 101 proto kernel metric 256 pref medium",
}

// ADD, CHECK and DEL at every spec version, dual-stack.
func TestAddCheckDelEveryVersion(t *testing.T) {
	for _, v := range spec.AllVersions {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			before := f.state()
			cfg := conf(v, "", f.prevResult(v, false))
			out := f.mustRun("ADD", cfg)
			after := f.state()
			for _, w := range wantAfterAdd {
				if !strings.Contains(after, w) {
					t.Errorf("after ADD, missing %q in:\n%s", w, after)
				}
			}
			if regexp.MustCompile(`(?m)^-[46] route: .* dev eth0( |$)`).MatchString(strings.Join(grepNot(after, "table"), "\n")) {
				t.Errorf("eth0 still has main-table routes:\n%s", after)
			}
			if !hasLine(after, "-4 route: 192.168.2.0/24 via 192.168.1.2 dev net1") {
				t.Errorf("net1's route moved:\n%s", after)
			}
			if v == "1.1.0" {
				for _, r := range jsonRoutes(t, out) {
					want := map[string]float64{"0.0.0.0/0": 100, "10.2.0.0/24": 100, "::/0": 101}[r["dst"].(string)]
					if r["table"] != want {
						t.Errorf("result route %v: table %v, want %v", r["dst"], r["table"], want)
					}
				}
			}
			if spec.VerbSupported(v, spec.CmdCheck) {
				f.mustRun("CHECK", conf(v, "", out))
			}
			f.mustRun("DEL", conf(v, "", out))
			gone := f.state()
			if strings.Contains(gone, "lookup 10") || strings.Contains(gone, "table 10") {
				t.Errorf("rules or tables left after DEL:\n%s", gone)
			}
			f.mustRun("DEL", conf(v, "", out))
			_ = before
		})
	}
}

func grepNot(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

// The kernel state ADD leaves is the reference's, except that the
// reference also copies an interface's gateway-less routes of the other
// address family into each table (no rule ever looks them up there).
func TestSameStateAsReference(t *testing.T) {
	for _, tc := range []struct {
		name, keys string
		net1       bool
		v4Table    string // where the reference also puts eth0's IPv6 routes
	}{
		{"dual-stack", "", false, "100"},
		{"table 100 taken", "", true, "101"},
		{"table", `"table":30`, false, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ours, ref := newFixture(t), newFixture(t)
			if tc.net1 {
				// Another sbr'ed interface already holds table 100.
				for _, f := range []*fixture{ours, ref} {
					f.ip("rule", "add", "from", "192.168.1.209", "table", "100")
					f.ip("route", "add", "192.168.2.0/24", "via", "192.168.1.2", "dev", "net1", "table", "100")
				}
			}
			ours.mustRun("ADD", conf("1.0.0", tc.keys, ours.prevResult("1.0.0", tc.net1)))
			if out, rc := ref.runRef("ADD", conf("1.0.0", tc.keys, ref.prevResult("1.0.0", tc.net1))); rc != 0 {
				t.Fatalf("reference ADD: %s", out)
			}
			crossFamily := regexp.MustCompile(`(?m)^-6 route: .* table ` + tc.v4Table + ` .*\n?`)
			o, r := ours.state(), crossFamily.ReplaceAllString(ref.state()+"\n", "")
			r = strings.TrimSuffix(r, "\n")
			if o != r {
				t.Errorf("state differs from the reference's:\n%s\nours:\n%s\nreference:\n%s", diff(o, r), o, ref.state())
			}
		})
	}
}

// "table": only rules, to the operator's table; its routes and the main
// table stay as they are; DEL removes the rules only.
func TestTable(t *testing.T) {
	f := newFixture(t)
	f.ip("route", "add", "default", "via", "10.1.1.1", "dev", "eth0", "table", "30")
	before := f.state()
	out := f.mustRun("ADD", conf("1.1.0", `"table":30`, f.prevResult("1.1.0", false)))
	want := before + "\n-4 rule: 32765:	from 10.1.1.2 lookup 30\n-6 rule: 32765:	from fd00:1::2 lookup 30"
	if got := f.state(); sortLines(got) != sortLines(want) {
		t.Errorf("state after ADD:\n%s", diff(sortLines(want), sortLines(got)))
	}
	if routes := jsonRoutes(t, out); routes[0]["table"] != nil {
		t.Errorf("result routes changed in table mode: %s", out)
	}
	f.mustRun("CHECK", conf("1.1.0", `"table":30`, out))
	o, rc := f.run("CHECK", conf("1.1.0", `"table":31`, out))
	expectError(t, o, rc, 999, "10.1.1.2", "table 31")
	f.mustRun("DEL", conf("1.1.0", `"table":30`, out))
	if got := f.state(); got != before {
		t.Errorf("state after DEL:\n%s", diff(before, got))
	}
}

func sortLines(s string) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(ls)
	return strings.Join(ls, "\n")
}

func hasLine(s, line string) bool {
	for _, l := range strings.Split(s, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// gateways (a static gateway per family) and addSourceHints (subnet routes
// stay in the main table with the address as source hint), the keys the
// reference gained after v1.9.1.
func TestGatewaysAndSourceHints(t *testing.T) {
	f := newFixture(t)
	keys := `"gateways":["10.1.1.254","fd00:1::fe"],"addSourceHints":true`
	out := f.mustRun("ADD", conf("1.1.0", keys, f.prevResult("1.1.0", false)))
	s := f.state()
	for _, w := range []string{
		"-4 route: default via 10.1.1.254 dev eth0 table 100",
		"-6 route: default via fd00:1::fe dev eth0 table 101",
		"-4 route: 10.1.1.0/24 dev eth0 proto kernel scope link src 10.1.1.2",
		"-6 route: fd00:1::/64 dev eth0 proto kernel src fd00:1::2 metric 256",
	} {
		if !strings.Contains(s, w) {
			t.Errorf("missing %q in:\n%s", w, s)
		}
	}
	for _, no := range []string{"-4 route: default via 10.1.1.1 dev eth0 proto", "-4 route: 10.2.0.0/24 via 10.1.1.5 dev eth0\n"} {
		if strings.Contains(s+"\n", no) {
			t.Errorf("%q still in the main table:\n%s", no, s)
		}
	}
	f.mustRun("CHECK", conf("1.1.0", keys, out))
	f.ip("route", "del", "10.1.1.0/24", "dev", "eth0")
	o, rc := f.run("CHECK", conf("1.1.0", keys, out))
	expectError(t, o, rc, 999, "10.1.1.0/24", "src 10.1.1.2")
	f.mustRun("DEL", conf("1.1.0", keys, out))
	if s := f.state(); strings.Contains(s, "lookup 10") || strings.Contains(s, "table 10") {
		t.Errorf("left after DEL:\n%s", s)
	}
}

// CHECK finds what differs from what ADD made.
func TestCheckFindsDifferences(t *testing.T) {
	for _, tc := range []struct {
		name     string
		break_   []string
		mentions []string
	}{
		{"rule gone", []string{"rule", "del", "from", "10.1.1.2", "table", "100"}, []string{"no rule", "10.1.1.2"}},
		{"default route gone", []string{"route", "del", "default", "table", "100"}, []string{"table 100", "default route via 10.1.1.1"}},
		{"moved route gone", []string{"route", "del", "10.2.0.0/24", "table", "100"}, []string{"10.2.0.0/24", "table 100"}},
		{"default route back in main", []string{"route", "add", "default", "via", "10.1.1.1", "dev", "eth0", "onlink"}, []string{"main table still routes 0.0.0.0/0 through eth0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			out := f.mustRun("ADD", conf("1.1.0", "", f.prevResult("1.1.0", false)))
			f.mustRun("CHECK", conf("1.1.0", "", out))
			f.ip(tc.break_...)
			o, rc := f.run("CHECK", conf("1.1.0", "", out))
			expectError(t, o, rc, 999, tc.mentions...)
		})
	}
}

// Bad input is refused with code 7 naming key and value, and nothing
// changes.
func TestBadInput(t *testing.T) {
	f := newFixture(t)
	prev := f.prevResult("1.0.0", false)
	before := f.state()
	for _, tc := range []struct {
		keys, prev string
		mentions   []string
	}{
		{`"table":-1`, prev, []string{"table -1"}},
		{`"table":0`, prev, []string{"table 0"}},
		{`"table":4294967296`, prev, []string{"table 4294967296"}},
		{`"table":"100"`, prev, []string{`table "100"`}},
		{`"table":254`, prev, []string{"table 254", "main"}},
		{`"table":1.5`, prev, []string{"table 1.5"}},
		{`"gateways":"10.1.1.1"`, prev, []string{`gateways "10.1.1.1"`}},
		{`"gateways":["10.1.1.1","fd00::1","10.1.1.2"]`, prev, []string{"3 entries"}},
		{`"gateways":["10.1.1.1","10.1.1.2"]`, prev, []string{"10.1.1.1 and 10.1.1.2"}},
		{`"gateways":["10.1.1.x"]`, prev, []string{`gateways[0] "10.1.1.x"`}},
		{`"gateways":[17]`, prev, []string{"gateways[0] 17"}},
		{`"gateways":["fe80::1%eth0"]`, prev, []string{`"fe80::1%eth0"`}},
		{`"gateways":["0.0.0.0"]`, prev, []string{`"0.0.0.0"`}},
		{`"addSourceHints":"yes"`, prev, []string{`addSourceHints "yes"`}},
		{``, ``, []string{`"prevResult" is required`}},
		{``, `{"cniVersion":"1.0.0","interfaces":[{"name":"eth9"}],"ips":[{"address":"10.9.9.9/24","interface":0}]}`, []string{`no IP address for interface "eth0"`}},
		{``, `{"cniVersion":"1.0.0"}`, []string{`no IP address for interface "eth0"`}},
	} {
		t.Run(tc.keys, func(t *testing.T) {
			out, rc := f.run("ADD", conf("1.0.0", tc.keys, tc.prev))
			expectError(t, out, rc, 7, tc.mentions...)
			if got := f.state(); got != before {
				t.Errorf("state changed by a refused ADD:\n%s", diff(before, got))
			}
		})
	}
}

// A failed ADD takes back its rules and routes: here the IPv6 gateway is
// not on the link, so its default route is refused after the IPv4 table
// is complete.
func TestFailedAddRollsBack(t *testing.T) {
	f := newFixture(t)
	before := f.state()
	out, rc := f.run("ADD", conf("1.0.0", `"gateways":["fd99::1"]`, f.prevResult("1.0.0", false)))
	expectError(t, out, rc, 999, "default route via fd99::1", "table 101")
	if got := f.state(); got != before {
		t.Errorf("state after the failed ADD:\n%s", diff(before, got))
	}
}

// ADD twice for the same attachment converges (the second finds its rules
// and tables) and DEL cleans up once.
func TestAddTwice(t *testing.T) {
	f := newFixture(t)
	cfg := conf("1.1.0", "", f.prevResult("1.1.0", false))
	out := f.mustRun("ADD", cfg)
	once := f.state()
	f.mustRun("ADD", cfg)
	if got := f.state(); got != once {
		t.Errorf("second ADD changed the state:\n%s", diff(once, got))
	}
	f.mustRun("CHECK", conf("1.1.0", "", out))
	f.mustRun("DEL", cfg)
	if s := f.state(); strings.Contains(s, "lookup 10") || strings.Contains(s, "table 10") {
		t.Errorf("left after DEL:\n%s", s)
	}
}

// Two ADDs for two interfaces of one namespace at once get two tables:
// the namespace lock serialises their reading and adding.
func TestConcurrentAdds(t *testing.T) {
	for i := range 8 {
		f := newFixture(t)
		net1Prev := `{"cniVersion":"1.0.0","interfaces":[{"name":"net1","sandbox":"` + f.path + `"}],"ips":[{"address":"192.168.1.209/24","gateway":"192.168.1.2","interface":0}]}`
		var wg sync.WaitGroup
		for _, a := range [][2]string{{"eth0", f.prevResult("1.0.0", false)}, {"net1", net1Prev}} {
			wg.Go(func() { f.mustRun("ADD", conf("1.0.0", "", a[1]), "CNI_IFNAME="+a[0]) })
		}
		wg.Wait()
		s := f.state()
		var tables []string
		for _, m := range regexp.MustCompile(`lookup (\d+)`).FindAllStringSubmatch(s, -1) {
			tables = append(tables, m[1])
		}
		sort.Strings(tables)
		if fmt.Sprint(tables) != "[100 101 102]" {
			t.Fatalf("round %d: tables %v, want three distinct (100 101 102):\n%s", i, tables, s)
		}
	}
}

// DEL needs no namespace; with the interface gone, prevResult's addresses
// still find the rules.
func TestDelTolerant(t *testing.T) {
	f := newFixture(t)
	cfg := conf("1.0.0", "", f.prevResult("1.0.0", false))
	f.mustRun("DEL", cfg, "CNI_NETNS=")
	f.mustRun("DEL", cfg, "CNI_NETNS=/run/netns/pbt-sbr-gone")
	out := f.mustRun("ADD", cfg)
	f.ip("link", "del", "eth0")
	f.mustRun("DEL", conf("1.0.0", "", out))
	if s := f.state(); strings.Contains(s, "lookup 10") {
		t.Errorf("rules left after DEL without the interface:\n%s", s)
	}
}

// TestDelInvalidConfigKeepsOperatorTable: a DEL whose configuration does
// not validate goes by "table" alone. With a readable table (the operator's
// table 30, another key bad), it removes sbr's rules to it and no route;
// with an unreadable table, the rules from the interface's addresses and
// again no route: the operator's table keeps its routes through the
// interface either way.
func TestDelInvalidConfigKeepsOperatorTable(t *testing.T) {
	for _, keys := range []string{`"table":30,"gateways":["not an address"]`, `"table":"thirty"`, `"table":30,"addSourceHints":"maybe"`} {
		f := newFixture(t)
		f.ip("route", "add", "default", "via", "10.1.1.1", "dev", "eth0", "table", "30")
		f.ip("route", "add", "10.9.0.0/24", "via", "10.1.1.7", "dev", "eth0", "table", "30")
		before := f.state()
		out := f.mustRun("ADD", conf("1.1.0", `"table":30`, f.prevResult("1.1.0", false)))
		f.mustRun("DEL", conf("1.1.0", keys, out))
		if got := f.state(); got != before {
			t.Errorf("%s: DEL left or removed:\n%s", keys, diff(before, got))
		}
	}
}
