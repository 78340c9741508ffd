//go:build linux && amd64

package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/rundir"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// Case is one network configuration to crash.
type Case struct {
	Name string
	// Conflist is the network; "{{DIR}}" stands for a fresh directory for
	// plugin state (host-local's and tuning's dataDir), checked like the
	// result cache.
	Conflist string
	// CapArgs is the runtime's CAP_ARGS (JSON), or "".
	CapArgs string
	// Sysctls are keys in the container's namespace (slash form below
	// /proc/sys) that the chain changes and DEL must restore.
	Sysctls []string
	// MinSteps guards the harness: the ADD must have at least this many
	// state-changing steps.
	MinSteps int
	// Setup, if set, prepares the namespaces (named host and cont) before
	// the first ADD: devices and servers a plugin needs (servers run
	// untraced and are never killed), with dir the case's state directory
	// ("{{DIR}}").
	Setup func(t *testing.T, host, cont, dir string)
	// HostDevices are links of the host namespace (made by Setup) that the
	// chain takes and DEL must give back as they were: under their name,
	// with their MAC, MTU, alias, up state and master (host-device).
	HostDevices []string
}

const (
	containerID = "crash1"
	ifName      = "eth0"
	// traceLimit bounds one traced ADD (it normally takes well under 1 s).
	traceLimit = 60 * time.Second
	// maxFailures stops a case after this many failing kill points.
	maxFailures = 5
)

type world struct {
	t                 *testing.T
	c                 Case
	bin, dir, network string
	host, hostPath    string
	cont, contPath    string
	env               []string
	gc                bool // the version has GC
	confDir           string
	// before holds the snapshot's network keys (links, addresses,
	// routes, rules) from before the first ADD: each must remain.
	before map[string]int
}

// Run crashes c's ADD at every step and checks what DEL (and GC) leave.
func Run(t *testing.T, c Case) { crash(t, c, spec.CmdAdd) }

// RunDel crashes c's DEL at every step (after a clean ADD) and checks what
// the DEL a runtime sends again (and GC) leave: DEL must be idempotent
// across a crash too.
func RunDel(t *testing.T, c Case) { crash(t, c, spec.CmdDel) }

func crash(t *testing.T, c Case, verb string) {
	w := setup(t, c)
	allowed, sysBefore := w.baseline()
	kills := map[string]int{}
	failures := 0
	for n := 1; ; n++ {
		if verb == spec.CmdDel {
			if out, err := w.patchbay("add"); err != nil {
				t.Fatalf("ADD before the DEL to kill: %v: %s", err, out)
			}
		}
		out, err := w.traced(verb, n)
		if err != nil {
			t.Fatalf("kill at step %d: %v", n, err)
		}
		if out.Killed == nil {
			if !out.Status.Exited() || out.Status.ExitStatus() != 0 {
				t.Errorf("the untouched %s (%d steps) failed: %v", verb, out.Steps, out.Status)
			}
			w.teardown("completed "+verb, allowed, sysBefore)
			if verb == spec.CmdAdd && out.Steps < c.MinSteps {
				t.Errorf("the ADD has %d state-changing steps, want at least %d: is the tracer counting?", out.Steps, c.MinSteps)
			}
			t.Logf("%s: %s: %d kill points; kills by process: %v", c.Name, verb, n-1, kills)
			break
		}
		kills[out.Killed.Comm]++
		what := verb + " killed before " + out.Killed.String()
		t.Log(what)
		if !w.teardown(what, allowed, sysBefore) {
			if failures++; failures >= maxFailures {
				t.Fatalf("stopping after %d failing kill points", failures)
			}
		}
	}
	if len(kills) < 2 {
		t.Errorf("kills hit only %v: want both patchbay and plugins", kills)
	}
}

// setup makes the namespaces, the state directory with the network's
// configuration in it, and the runtime's environment.
func setup(t *testing.T, c Case) *world {
	testutil.RequireRoot(t)
	w := &world{t: t, c: c, bin: testutil.OurBin(t), dir: t.TempDir()}
	w.host, w.hostPath = testutil.NewNS(t, "crh")
	w.cont, w.contPath = testutil.NewNS(t, "crc")
	if c.Setup != nil {
		c.Setup(t, w.host, w.cont, w.dir)
	}
	conf := strings.ReplaceAll(c.Conflist, "{{DIR}}", w.dir)
	list, err := spec.ParseConfList([]byte(conf))
	if err != nil {
		t.Fatalf("case %s: %v", c.Name, err)
	}
	w.network, w.gc = list.Name, spec.VerbSupported(list.Version(), spec.CmdGC)
	w.confDir = filepath.Join(w.dir, "net.d")
	if err := os.MkdirAll(w.confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.confDir, "10-crash.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// The run directory (attachment locks, the firewall layer's locks and
	// records) is the world's own: the file walk of the snapshot covers it.
	w.env = []string{"PATH=" + os.Getenv("PATH"), "NETCONFPATH=" + w.confDir, "CNI_PATH=" + w.bin,
		"CNI_CACHE_DIR=" + filepath.Join(w.dir, "cache"), "CNI_CONTAINERID=" + containerID, "CNI_IFNAME=" + ifName,
		rundir.Env + "=" + filepath.Join(w.dir, "run"), "DBUS_SYSTEM_BUS_ADDRESS=" + testutil.NoSystemBus}
	if c.CapArgs != "" {
		w.env = append(w.env, "CAP_ARGS="+c.CapArgs)
	}
	return w
}

// baseline runs a clean ADD and DEL (and GC): what they leave (a bridge,
// IPAM's lock file...) may be left after a crash too. It returns what may
// remain and the sysctls' values before.
func (w *world) baseline() (allowed map[string]int, sysBefore map[string]string) {
	t := w.t
	before, sysBefore := w.snapshot(), w.sysctls()
	w.before = map[string]int{}
	for k, n := range before {
		if kept.MatchString(k) {
			w.before[k] = n
		}
	}
	if out, err := w.patchbay("add"); err != nil {
		t.Fatalf("clean ADD: %v: %s", err, out)
	}
	if out, _ := testutil.InNS(t, w.cont, "ip", "-o", "link", "show", ifName); !strings.Contains(out, ifName) {
		t.Fatalf("clean ADD made no %s in the container", ifName)
	}
	w.teardown("clean ADD", nil, nil)
	allowed = union(before, w.snapshot())
	w.check("clean ADD, DEL and GC", allowed, sysBefore)
	return allowed, sysBefore
}

// teardown sends DEL, then GC where the version has it; false if
// something failed. With allowed set it checks the state after each (DEL
// alone must leave nothing: a 1.0.0 runtime sends no GC).
func (w *world) teardown(what string, allowed map[string]int, sysBefore map[string]string) bool {
	w.t.Helper()
	if out, err := w.patchbay("del"); err != nil {
		w.t.Errorf("%s: DEL failed: %v: %s", what, err, out)
		return false
	}
	if allowed != nil && !w.check(what+", then DEL", allowed, sysBefore) {
		return false
	}
	if w.gc {
		if out, err := w.patchbay("gc"); err != nil {
			w.t.Errorf("%s: GC failed: %v: %s", what, err, out)
			return false
		}
		if allowed != nil && !w.check(what+", then DEL and GC", allowed, sysBefore) {
			return false
		}
	}
	return true
}

// patchbay runs `patchbay VERB NETWORK CONTAINER-NETNS` in the host
// namespace, untraced.
func (w *world) patchbay(verb string) (string, error) {
	var out []byte
	err := netns.Do(w.hostPath, func() error {
		cmd := exec.Command(filepath.Join(w.bin, "patchbay"), verb, w.network, w.contPath)
		cmd.Env = w.env
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	return string(out), err
}

// traced runs `patchbay VERB` under the tracer, killing at step n.
func (w *world) traced(verb string, n int) (Outcome, error) {
	var out Outcome
	err := netns.Do(w.hostPath, func() error {
		devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer devnull.Close()
		out, err = RunKillingAt([]string{filepath.Join(w.bin, "patchbay"), strings.ToLower(verb), w.network, w.contPath}, w.env, devnull, devnull, n, traceLimit)
		return err
	})
	return out, err
}

// check compares the state with what may remain; false (after reporting)
// when something is left or a sysctl is not restored.
func (w *world) check(what string, allowed map[string]int, sysBefore map[string]string) bool {
	w.t.Helper()
	var left []string
	now := w.snapshot()
	for k, n := range now {
		if n > allowed[k] {
			left = append(left, k)
		}
	}
	// What the namespaces held before the first ADD must be there still
	// (a master, a device given back, the host's own routes and rules).
	for k, n := range w.before {
		if n > now[k] {
			left = append(left, "missing: "+k)
		}
	}
	for k, v := range w.sysctls() {
		if v != sysBefore[k] {
			left = append(left, fmt.Sprintf("sysctl %s = %q (was %q)", k, v, sysBefore[k]))
		}
	}
	if len(left) == 0 {
		return true
	}
	sort.Strings(left)
	w.t.Errorf("%s: left behind:\n\t%s", what, strings.Join(left, "\n\t"))
	return false
}

func union(a, b map[string]int) map[string]int {
	out := map[string]int{}
	for _, m := range []map[string]int{a, b} {
		for k, n := range m {
			out[k] = max(out[k], n)
		}
	}
	return out
}

// snapshot lists what exists: links (with their up state and master;
// the case's host devices also with MAC, MTU and alias), addresses, routes
// in every table and policy rules in both namespaces (IPv6 link-local
// ones aside: they follow MACs), nftables,
// iptables and ip6tables lines and qdiscs in the host namespace, and files
// and directories under the state directory (the run directory with the
// attachment's lock file included). Values count duplicates.
func (w *world) snapshot() map[string]int {
	w.t.Helper()
	s := map[string]int{}
	for _, ns := range []string{w.host, w.cont} {
		role := map[bool]string{true: "host", false: "container"}[ns == w.host]
		var links []struct {
			Name   string   `json:"ifname"`
			Flags  []string `json:"flags"`
			Master string   `json:"master"`
			MAC    string   `json:"address"`
			MTU    int      `json:"mtu"`
			Alias  string   `json:"ifalias"`
			Info   struct {
				Kind string `json:"info_kind"`
			} `json:"linkinfo"`
			AddrInfo []struct {
				Local     string `json:"local"`
				PrefixLen int    `json:"prefixlen"`
			} `json:"addr_info"`
		}
		w.ipJSON(ns, &links, "-d", "addr", "show")
		for _, l := range links {
			state := "down"
			if slices.Contains(l.Flags, "UP") {
				state = "up"
			}
			key := fmt.Sprintf("%s link %s (%s) %s master %q", role, l.Name, l.Info.Kind, state, l.Master)
			if ns == w.host && slices.Contains(w.c.HostDevices, l.Name) {
				key += fmt.Sprintf(" mac %s mtu %d alias %q", l.MAC, l.MTU, l.Alias)
			}
			s[key]++
			for _, a := range l.AddrInfo {
				if !strings.HasPrefix(a.Local, "fe80:") {
					s[fmt.Sprintf("%s addr %s %s/%d", role, l.Name, a.Local, a.PrefixLen)]++
				}
			}
		}
		var routes []map[string]any
		w.ipJSON(ns, &routes, "route", "show", "table", "all")
		var r6 []map[string]any
		w.ipJSON(ns, &r6, "-6", "route", "show", "table", "all")
		for _, r := range append(routes, r6...) {
			dst, _ := r["dst"].(string)
			if strings.HasPrefix(dst, "fe80:") || strings.HasPrefix(dst, "ff00:") || strings.HasPrefix(dst, "multicast") {
				continue
			}
			s[fmt.Sprintf("%s route %v %v %s dev %v via %v", role, r["table"], r["type"], dst, r["dev"], r["gateway"])]++
		}
		// Policy rules (sbr's): fmt prints a map's keys sorted.
		var rules, rules6 []map[string]any
		w.ipJSON(ns, &rules, "rule", "show")
		w.ipJSON(ns, &rules6, "-6", "rule", "show")
		for _, r := range rules {
			s[fmt.Sprintf("%s rule %v", role, r)]++
		}
		for _, r := range rules6 {
			s[fmt.Sprintf("%s rule6 %v", role, r)]++
		}
	}
	if out, err := testutil.InNS(w.t, w.host, "nft", "list", "ruleset"); err != nil {
		w.t.Fatalf("nft list ruleset: %v: %s", err, out)
	} else {
		for _, line := range strings.Split(out, "\n") {
			if line = counters.ReplaceAllString(strings.TrimSpace(line), "counter"); line != "" && line != "}" {
				s["nft "+line]++
			}
		}
	}
	// iptables and ip6tables (with the legacy backend the rules are not in
	// nft's view), and the host's qdiscs (bandwidth's ifb devices carry
	// theirs; the host veth's go with it).
	for _, cmd := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"tc", "qdisc", "show"}} {
		out, err := testutil.InNS(w.t, w.host, cmd...)
		if err != nil {
			w.t.Fatalf("%v: %v: %s", cmd, err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if line = strings.TrimSpace(xtCounters.ReplaceAllString(line, "")); line != "" && !strings.HasPrefix(line, "#") {
				s[cmd[0]+" "+line]++
			}
		}
	}
	filepath.WalkDir(w.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != w.dir && !strings.HasPrefix(p, w.confDir) {
			rel, _ := filepath.Rel(w.dir, p)
			if d.IsDir() {
				s["directory "+rel]++ // an empty one left by a kill counts too
			} else {
				s["file "+rel]++
			}
		}
		return nil
	})
	return s
}

var (
	// kept matches the snapshot keys that must outlive every crash.
	kept       = regexp.MustCompile(`^(host|container) (link|addr|route|rule|rule6) `)
	counters   = regexp.MustCompile(`counter packets \d+ bytes \d+`)
	xtCounters = regexp.MustCompile(`\[\d+:\d+\]`)
)

func (w *world) ipJSON(ns string, into any, args ...string) {
	w.t.Helper()
	cmd := exec.Command("ip", append([]string{"-n", ns, "-j"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		w.t.Fatalf("ip %v: %v: %s", args, err, stderr.String())
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return
	}
	if err := json.Unmarshal(out, into); err != nil {
		w.t.Fatalf("ip -j %v: %v: %s", args, err, out)
	}
}

// sysctls reads the case's sysctls in the container namespace.
func (w *world) sysctls() map[string]string {
	out := map[string]string{}
	if len(w.c.Sysctls) == 0 {
		return out
	}
	netns.Do(w.contPath, func() error {
		for _, k := range w.c.Sysctls {
			f, err := os.Open("/proc/sys/" + k)
			if err != nil {
				out[k] = "<" + err.Error() + ">"
				continue
			}
			b, _ := io.ReadAll(f)
			f.Close()
			out[k] = strings.TrimSpace(string(b))
		}
		return nil
	})
	return out
}
