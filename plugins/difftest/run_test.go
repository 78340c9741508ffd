package difftest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// dcase is one differential scenario: the same conflist and attachments on
// both sides.
type dcase struct {
	name string
	conf string // conflist template; {{DIR}} becomes the side's private dir
	atts []att
	// ignore matches state lines that differ on purpose (each documented
	// in the plugin's README.md under "Differences from the reference").
	ignore string
	// resultIgnore is applied to result JSON lines the same way.
	resultIgnore string
	// deliberate lists regexps whose matches are cut from state lines of
	// both sides before comparing: documented deliberate differences.
	deliberate []string
	// setup prepares each side (host and containers) before the ADDs.
	setup func(t *testing.T, s *side)
	// refLeaks: the reference leaves pieces of a failed ADD behind, so
	// the state after ADD is not compared (ours is checked against its
	// own state before the ADD instead).
	refLeaks bool
	// addCodes: the CNI codes each side's failing ADD gives where ours
	// deliberately differs (documented in the plugin's README), as
	// errCode spells them: {ours, ref}.
	addCodes [2]string
	// refCheckFails: the reference's CHECK fails on purpose-free grounds
	// (its bridge has no fixed MAC, so the MAC in an earlier ADD result goes
	// stale when a later port joins); ours must pass.
	refCheckFails bool
	// noDel skips the DELs (e.g. they would remove a pre-existing link).
	noDel bool
	// noSecondDel skips the repeated DEL (for plugins whose DEL without
	// a cached result is not comparable).
	noSecondDel bool
}

func one(id string, caps map[string]any) []att {
	return []att{{id: id, ifname: "eth0", cont: "c1", caps: caps}}
}

// runCase runs ADD, CHECK, STATUS, DEL and a second DEL on both sides and
// reports every difference. An ADD of ours that fails must leave the state
// exactly as it was before it.
func runCase(t *testing.T, c dcase) {
	t.Helper()
	ss := sides(t)
	ours, ref := ss[0], ss[1]
	if c.setup != nil {
		for _, s := range ss {
			c.setup(t, s)
		}
	}
	var ignore, rignore *regexp.Regexp
	if c.ignore == "" {
		// Firewall rules differ by design: our default backend is
		// nftables (the reference's: iptables), and both our backends use
		// their own tables and chains (documented in portmap's README).
		c.ignore = "^fw: "
	}
	ignore = regexp.MustCompile(c.ignore)
	if c.resultIgnore != "" {
		rignore = regexp.MustCompile(c.resultIgnore)
	}
	cut := append(append([]string{}, commonDeliberate...), c.deliberate...)
	lists := func(a att) (lo, lr *spec.ConfList) {
		conf := c.conf
		if a.conf != "" {
			conf = a.conf
		}
		return ours.list(t, conf), ref.list(t, conf)
	}
	added := map[string]bool{}
	for _, a := range c.atts {
		lo, lr := lists(a)
		before := cutAll(ours.world(t), cut)
		ro, eo := ours.add(t, lo, a)
		rr, er := ref.add(t, lr, a)
		if c.addCodes[0] != "" {
			if errCode(eo) != c.addCodes[0] || errCode(er) != c.addCodes[1] {
				t.Errorf("ADD %s: ours %s (%v), ref %s (%v); want %s and %s", a.id, errCode(eo), eo, errCode(er), er, c.addCodes[0], c.addCodes[1])
			}
		} else if errCode(eo) != errCode(er) {
			t.Errorf("ADD %s: ours %s (%v), ref %s (%v)", a.id, errCode(eo), eo, errCode(er), er)
		}
		if eo == nil && er == nil {
			added[a.id] = true
			diffLines(t, "ADD "+a.id+" result", strings.Split(ro, "\n"), strings.Split(rr, "\n"), rignore)
		} else {
			t.Logf("ADD %s errors: ours: %v; ref: %v", a.id, eo, er)
		}
		if eo != nil {
			ours.settle(t)
			// host-local's lock and last_reserved_ip files stay, as with
			// the reference: they hold no allocation.
			diffWorlds(t, "our failed ADD "+a.id+" (ours: after, ref: before)", cutAll(ours.world(t), cut), before,
				regexp.MustCompile(`^file: \S+/(lock|last_reserved_ip\.\d+) =`))
		}
	}
	ours.settle(t)
	ref.settle(t)
	if c.refLeaks {
		t.Logf("not comparing the state after ADD: the reference leaves a failed ADD's pieces behind")
	} else {
		diffWorlds(t, "after ADD", cutAll(ours.world(t), cut), cutAll(ref.world(t), cut), ignore)
	}
	version := ours.list(t, c.conf).Version()
	if spec.VerbSupported(version, spec.CmdCheck) {
		for _, a := range c.atts {
			if !added[a.id] {
				continue
			}
			lo, lr := lists(a)
			eo, er := ours.verb(t, "CHECK", lo, a), ref.verb(t, "CHECK", lr, a)
			if c.refCheckFails && eo == nil && er != nil {
				t.Logf("CHECK %s: ours ok, reference fails as expected: %v", a.id, er)
			} else if errCode(eo) != errCode(er) {
				t.Errorf("CHECK %s: ours %s (%v), ref %s (%v)", a.id, errCode(eo), eo, errCode(er), er)
			}
		}
	}
	if spec.VerbSupported(version, spec.CmdStatus) {
		lo, lr := lists(att{})
		eo, er := ours.verb(t, "STATUS", lo, att{}), ref.verb(t, "STATUS", lr, att{})
		if errCode(eo) != errCode(er) {
			t.Errorf("STATUS: ours %s (%v), ref %s (%v)", errCode(eo), eo, errCode(er), er)
		}
	}
	if c.noDel {
		return
	}
	rounds := 2
	if c.noSecondDel {
		rounds = 1
	}
	for round := range rounds {
		for i := len(c.atts) - 1; i >= 0; i-- {
			a := c.atts[i]
			lo, lr := lists(a)
			eo, er := ours.verb(t, "DEL", lo, a), ref.verb(t, "DEL", lr, a)
			if errCode(eo) != errCode(er) || eo != nil {
				t.Errorf("DEL %s (round %d): ours %s (%v), ref %s (%v)", a.id, round+1, errCode(eo), eo, errCode(er), er)
			}
		}
		if round == 0 { // a repeated DEL is compared by its outcome only
			diffWorlds(t, "after DEL", cutAll(ours.world(t), cut), cutAll(ref.world(t), cut), ignore)
		}
	}
}

func diffLines(t *testing.T, what string, a, b []string, ignore *regexp.Regexp) {
	t.Helper()
	oa, ob := lineDiff(a, b)
	var msg strings.Builder
	for _, l := range oa {
		if ignore == nil || !ignore.MatchString(l) {
			msg.WriteString("  ours: " + l + "\n")
		}
	}
	for _, l := range ob {
		if ignore == nil || !ignore.MatchString(l) {
			msg.WriteString("  ref:  " + l + "\n")
		}
	}
	if msg.Len() > 0 {
		t.Errorf("%s differs:\n%s\nours:\n%s\nref:\n%s", what, msg.String(), strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
}

// commonDeliberate: differences every plugin has on purpose (see the
// plugins' README.md, "Differences from the reference").
var commonDeliberate = []string{
	// A bridge's carrier follows its ports with the kernel's link-watch
	// delay (up to a second): not a plugin difference.
	`"NO-CARRIER",`, ` operstate=(?:UP|DOWN)`, `"linkdown"`,
	// IPv6 addresses are added with IFA_F_NODAD where the reference lets
	// DAD run (bridge turns accept_dad off anyway unless enabledad).
	` nodad=true`,
}

// ptpDeliberate: ptp's container addresses carry IFA_F_NOPREFIXROUTE
// (the reference adds them plainly and deletes the kernel's subnet route:
// the same routes, and ours survive a link flap); host routes to the
// container are scope link (the reference's are scope host).
var ptpDeliberate = []string{` noprefixroute=true`, `(?m)(route4: dev=vethX dst=\S+ flags= )scope=(link|host)$`}

func cutAll(w map[string][]string, res []string) map[string][]string {
	out := map[string][]string{}
	for k, lines := range w {
		for _, l := range lines {
			for _, r := range res {
				re := regexp.MustCompile(r)
				if re.NumSubexp() > 0 {
					l = re.ReplaceAllString(l, "${1}scope=*")
				} else {
					l = re.ReplaceAllString(l, "")
				}
			}
			out[k] = append(out[k], l)
		}
	}
	return out
}
