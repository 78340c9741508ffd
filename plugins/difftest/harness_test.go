// Package difftest runs the same network configurations through our plugins
// and the reference plugins v1.9.1, each side in its own test "host" and
// container namespaces, and compares results, container state and host
// state after normalising what is random by design (MACs, veth names,
// link-local addresses, namespace paths).
package difftest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// side is one implementation with its own host netns and directories.
type side struct {
	name     string // "ours" or "ref"
	host     string
	hostPath string
	dir      string // {{DIR}} in conflists: host-local data, etc.
	cni      *runtime.CNI
	conts    map[string]string // container key -> netns name
	contPath map[string]string
}

func newSide(t *testing.T, name, bin string) *side {
	t.Helper()
	s := &side{name: name, dir: t.TempDir(), conts: map[string]string{}, contPath: map[string]string{}}
	s.host, s.hostPath = testutil.NewNS(t, "dh"+name[:1])
	s.cni = &runtime.CNI{Path: []string{bin}, CacheDir: filepath.Join(s.dir, "cache")}
	return s
}

func sides(t *testing.T) []*side {
	t.Helper()
	return []*side{newSide(t, "ours", testutil.OurBin(t)), newSide(t, "ref", testutil.RefBin(t))}
}

// container returns (creating on first use) this side's container netns for key.
func (s *side) container(t *testing.T, key string) (string, string) {
	t.Helper()
	if _, ok := s.conts[key]; !ok {
		s.conts[key], s.contPath[key] = testutil.NewNS(t, "dc"+s.name[:1])
	}
	return s.conts[key], s.contPath[key]
}

func (s *side) list(t *testing.T, tmpl string) *spec.ConfList {
	t.Helper()
	l, err := spec.ParseConfList([]byte(strings.ReplaceAll(tmpl, "{{DIR}}", s.dir)))
	if err != nil {
		t.Fatalf("%s: parse conflist: %v\n%s", s.name, err, tmpl)
	}
	return l
}

// att is one attachment of a case.
type att struct {
	id, ifname, cont string // cont: container key (several attachments may share one)
	conf             string // a conflist other than the case's
	caps             map[string]any
	args             [][2]string
}

func (s *side) rt(t *testing.T, a att) *runtime.RuntimeConf {
	_, p := s.container(t, a.cont)
	return &runtime.RuntimeConf{ContainerID: a.id, NetNS: p, IfName: a.ifname, CapabilityArgs: a.caps, Args: a.args}
}

// inHost runs f in the side's host netns, as a runtime on that host would.
func (s *side) inHost(t *testing.T, f func() error) error {
	t.Helper()
	var ferr error
	if err := netns.Do(s.hostPath, func() error { ferr = f(); return nil }); err != nil {
		t.Fatalf("enter host netns: %v", err)
	}
	return ferr
}

var ctx = context.Background()

func (s *side) add(t *testing.T, l *spec.ConfList, a att) (string, error) {
	t.Helper()
	var res *spec.Result
	err := s.inHost(t, func() (err error) { res, err = s.cni.AddNetworkList(ctx, l, s.rt(t, a)); return err })
	if err != nil {
		return "", err
	}
	b, err := res.Encode(l.Version())
	if err != nil {
		t.Fatalf("%s: encode result: %v", s.name, err)
	}
	return s.normJSON(t, b), nil
}

func (s *side) verb(t *testing.T, verb string, l *spec.ConfList, a att) error {
	t.Helper()
	return s.inHost(t, func() error {
		switch verb {
		case "CHECK":
			return s.cni.CheckNetworkList(ctx, l, s.rt(t, a))
		case "DEL":
			return s.cni.DelNetworkList(ctx, l, s.rt(t, a))
		case "STATUS":
			return s.cni.StatusNetworkList(ctx, l)
		}
		t.Fatalf("verb %s", verb)
		return nil
	})
}

// errCode is "ok" or "code N" (the CNI code: messages legitimately differ).
func errCode(err error) string {
	if err == nil {
		return "ok"
	}
	return fmt.Sprintf("code %d", spec.AsError(err, 999).Code)
}

var (
	reMAC   = regexp.MustCompile(`\b([0-9a-f]{2}:){5}[0-9a-f]{2}\b`)
	reVeth  = regexp.MustCompile(`\bveth[0-9a-f]{8}\b`)
	reLL    = regexp.MustCompile(`\bfe80::[0-9a-f:]+`)
	reHexID = regexp.MustCompile(`\b[0-9a-f]{4}\.[0-9a-f]{12}\b`) // bridge ids
	// fixedMAC is the MAC cases configure (tuning's mac capability): kept,
	// so that both sides must show it.
	fixedMAC = "00:11:22:33:44:66"
)

// norm replaces what differs between any two runs by design.
func (s *side) norm(x string) string {
	for k, n := range s.conts {
		x = strings.ReplaceAll(x, s.contPath[k], "CONTNS:"+k)
		x = strings.ReplaceAll(x, n, "CONTNS:"+k)
	}
	x = strings.ReplaceAll(x, s.hostPath, "HOSTNS")
	x = strings.ReplaceAll(x, s.host, "HOSTNS")
	x = strings.ReplaceAll(x, s.dir, "DIR")
	x = reMAC.ReplaceAllStringFunc(x, func(m string) string {
		if m == fixedMAC {
			return m
		}
		return "MAC"
	})
	x = reVeth.ReplaceAllString(x, "vethX")
	x = reLL.ReplaceAllString(x, "fe80::X")
	return reHexID.ReplaceAllString(x, "BRID")
}

// normJSON normalises and re-encodes with sorted keys.
func (s *side) normJSON(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s.norm(string(b))), &v); err != nil {
		t.Fatalf("%s: %v: %s", s.name, err, b)
	}
	out, _ := json.MarshalIndent(v, "", " ")
	return string(out)
}

// dropKey: JSON keys from `ip -j` that differ between any two runs.
var dropKey = regexp.MustCompile(`(^|\.)(ifindex|link_index|link_netnsid|.*timer.*|.*_id|id|hash_elasticity|hash_max|` +
	`valid_life_time|preferred_life_time|stats.*|num_tx_queues|num_rx_queues|gso_.*|gro_.*|tso_.*|parentbus|parentdev|` +
	`inet6_addr_gen_mode|addrgenmode|min_mtu|max_mtu|promiscuity|allmulti|tcp_dsack|port_no|no_linkinfo|` +
	`root_port|root_path_cost|topology_change.*|designated_.*|forward_delay_timer|config_pending|` +
	`multicast_router|mcast_.*|group|tentative)$`)

// flatten turns one JSON object into a "k=v k=v" line, keys sorted.
func flatten(prefix string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flatten(p, vv, out)
		}
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			b, _ := json.Marshal(e)
			parts = append(parts, string(b))
		}
		sort.Strings(parts)
		out[prefix] = strings.Join(parts, ",")
	default:
		if !dropKey.MatchString(prefix) {
			out[prefix] = fmt.Sprint(x)
		}
	}
}

func line(obj map[string]any) string {
	m := map[string]string{}
	flatten("", obj, m)
	keys := make([]string, 0, len(m))
	for k := range m {
		if !dropKey.MatchString(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

func sh(t *testing.T, ns, script string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("in %s: %s: %v", ns, script, err)
	}
	return string(out)
}

// jsonLines runs an `ip -j` command and returns one flattened line per object.
func jsonLines(t *testing.T, ns, prefix, cmd string) []string {
	t.Helper()
	var objs []map[string]any
	out := sh(t, ns, cmd)
	if strings.TrimSpace(out) == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(out), &objs); err != nil {
		t.Fatalf("%s: %v: %s", cmd, err, out)
	}
	var lines []string
	for _, o := range objs {
		if ai, ok := o["addr_info"].([]any); ok { // one line per address
			for _, a := range ai {
				am := a.(map[string]any)
				am["dev"] = o["ifname"]
				lines = append(lines, prefix+line(am))
			}
			continue
		}
		l := prefix + line(o)
		if strings.HasPrefix(prefix, "route6") && strings.Contains(l, "table=local") {
			continue // follows from the addresses, and appears only once DAD is done
		}
		lines = append(lines, l)
	}
	return lines
}

// snapshot is one namespace's state as normalised, sorted lines.
func (s *side) snapshot(t *testing.T, ns string, host bool) []string {
	t.Helper()
	var lines []string
	lines = append(lines, jsonLines(t, ns, "link: ", "ip -d -j link show")...)
	lines = append(lines, jsonLines(t, ns, "addr: ", "ip -j addr show")...)
	lines = append(lines, jsonLines(t, ns, "route4: ", "ip -4 -j route show table all")...)
	lines = append(lines, jsonLines(t, ns, "route6: ", "ip -6 -j route show table all")...)
	lines = append(lines, tcAndRules(t, ns)...) // bwsbr_test.go
	// Only sysctls that differ from a fresh namespace's defaults matter;
	// listing all and diffing the two sides finds exactly those.
	for _, l := range strings.Split(sh(t, ns, `grep -r . /proc/sys/net/ipv4/conf /proc/sys/net/ipv6/conf /proc/sys/net/ipv4/ip_forward 2>/dev/null || true`), "\n") {
		if l != "" && !strings.Contains(l, "stable_secret") {
			lines = append(lines, "sysctl: "+strings.TrimPrefix(l, "/proc/sys/"))
		}
	}
	if host {
		for _, l := range strings.Split(sh(t, ns, `nft list ruleset 2>/dev/null; iptables-save 2>/dev/null; ip6tables-save 2>/dev/null`), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			if strings.HasPrefix(l, ":") { // chain policy counters
				l = regexp.MustCompile(`\[\d+:\d+\]`).ReplaceAllString(l, "")
			}
			lines = append(lines, "fw: "+l)
		}
		files, _ := filepath.Glob(filepath.Join(s.dir, "ipam", "*", "*"))
		for _, f := range files {
			if filepath.Base(f) == ".patchbay-index" {
				continue // our host-local's index, documented in its README
			}
			b, _ := exec.Command("cat", f).Output()
			rel, _ := filepath.Rel(s.dir, f)
			lines = append(lines, fmt.Sprintf("file: %s = %q", rel, b))
		}
	}
	for i := range lines {
		lines[i] = s.norm(lines[i])
	}
	sort.Strings(lines)
	return lines
}

// settle waits (up to 2 s) for veth carrier changes to be reported: the
// kernel's link watch may delay them by up to a second after a burst of
// link changes, which is no plugin difference.
func (s *side) settle(t *testing.T) {
	t.Helper()
	nss := []string{s.host}
	for _, n := range s.conts {
		nss = append(nss, n)
	}
	for _, ns := range nss {
		for range 40 {
			if !strings.Contains(sh(t, ns, "ip -o link show type veth"), "NO-CARRIER") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// world is the state of the host and every container of a side.
func (s *side) world(t *testing.T) map[string][]string {
	w := map[string][]string{"host": s.snapshot(t, s.host, true)}
	for k, n := range s.conts {
		w["container "+k] = s.snapshot(t, n, false)
	}
	return w
}

// lineDiff lists lines only in a ("ours") or only in b ("ref"), keeping
// duplicates' multiplicity.
func lineDiff(a, b []string) (onlyA, onlyB []string) {
	cnt := map[string]int{}
	for _, l := range b {
		cnt[l]++
	}
	for _, l := range a {
		if cnt[l] > 0 {
			cnt[l]--
		} else {
			onlyA = append(onlyA, l)
		}
	}
	for _, l := range b {
		if cnt[l] > 0 {
			cnt[l]--
			onlyB = append(onlyB, l)
		}
	}
	return
}

// diffWorlds reports state differences, ignoring lines matched by ignore.
func diffWorlds(t *testing.T, stage string, ours, ref map[string][]string, ignore *regexp.Regexp) {
	t.Helper()
	keys := map[string]bool{}
	for k := range ours {
		keys[k] = true
	}
	for k := range ref {
		keys[k] = true
	}
	for k := range keys {
		a, b := ours[k], ref[k]
		oa, ob := lineDiff(a, b)
		var msg strings.Builder
		for _, l := range oa {
			if ignore == nil || !ignore.MatchString(l) {
				fmt.Fprintf(&msg, "  ours: %s\n", l)
			}
		}
		for _, l := range ob {
			if ignore == nil || !ignore.MatchString(l) {
				fmt.Fprintf(&msg, "  ref:  %s\n", l)
			}
		}
		if msg.Len() > 0 {
			t.Errorf("%s: %s state differs:\n%s", stage, k, msg.String())
		}
	}
}
