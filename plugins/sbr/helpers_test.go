package sbr

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// fixture is a container namespace with eth0 (the attachment's interface:
// 10.1.1.2/24 and fd00:1::2/64, with a default route each and one more
// IPv4 route) and net1 (another interface, 192.168.1.209/24), each a veth
// whose peer stays in the namespace.
type fixture struct {
	t          *testing.T
	name, path string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t}
	f.name, f.path = testutil.NewNS(t, "sbr")
	f.sh("sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0")
	for _, l := range []string{"eth0", "net1"} {
		f.ip("link", "add", l, "type", "veth", "peer", "name", l+"p")
		f.ip("link", "set", l+"p", "up")
	}
	f.ip("addr", "add", "10.1.1.2/24", "dev", "eth0")
	f.ip("addr", "add", "fd00:1::2/64", "dev", "eth0", "nodad")
	f.ip("addr", "add", "192.168.1.209/24", "dev", "net1")
	f.ip("link", "set", "eth0", "up")
	f.ip("link", "set", "net1", "up")
	f.ip("route", "add", "default", "via", "10.1.1.1", "dev", "eth0")
	f.ip("route", "add", "10.2.0.0/24", "via", "10.1.1.5", "dev", "eth0")
	f.ip("-6", "route", "add", "default", "via", "fd00:1::1", "dev", "eth0")
	f.ip("route", "add", "192.168.2.0/24", "via", "192.168.1.2", "dev", "net1")
	return f
}

func (f *fixture) ip(args ...string) {
	f.t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", f.name}, args...)...).CombinedOutput(); err != nil {
		f.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func (f *fixture) sh(script string) string {
	f.t.Helper()
	out, err := exec.Command("ip", "netns", "exec", f.name, "sh", "-c", script).Output()
	if err != nil {
		f.t.Fatalf("%s: %v", script, err)
	}
	return string(out)
}

var (
	reMetricPref = regexp.MustCompile(` +$`)
)

// state is the namespace's rules and routes (all tables but local), one
// line each, sorted. dropOtherFamily leaves out IPv6 routes in tables
// whose rules select IPv4 sources and vice versa (the reference's
// cross-family copies).
func (f *fixture) state() string {
	f.t.Helper()
	var lines []string
	for _, cmd := range []string{"ip -4 rule", "ip -6 rule", "ip -4 route show table all", "ip -6 route show table all"} {
		for _, l := range strings.Split(f.sh(cmd), "\n") {
			l = reMetricPref.ReplaceAllString(l, "")
			if l == "" || strings.Contains(l, "table local") {
				continue
			}
			// The kernel adds the main table's link-local route when a
			// link comes up, some time later: not the plugin's doing.
			if strings.HasPrefix(l, "fe80::/64 dev ") && strings.Contains(l, "proto kernel") && !strings.Contains(l, " table ") {
				continue
			}
			lines = append(lines, strings.Fields(cmd)[1]+" "+strings.Fields(cmd)[2]+": "+l)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// prevResult lists eth0 (and net1, when withNet1) and their addresses.
func (f *fixture) prevResult(version string, withNet1 bool) string {
	if spec.Compare(version, spec.V030) < 0 {
		return `{"cniVersion":"` + version + `","ip4":{"ip":"10.1.1.2/24","gateway":"10.1.1.1","routes":[{"dst":"0.0.0.0/0"},{"dst":"10.2.0.0/24","gw":"10.1.1.5"}]},"ip6":{"ip":"fd00:1::2/64","gateway":"fd00:1::1","routes":[{"dst":"::/0"}]}}`
	}
	ifs := `{"name":"eth0","sandbox":"` + f.path + `"}`
	ips := `{"address":"10.1.1.2/24","gateway":"10.1.1.1","interface":0},{"address":"fd00:1::2/64","gateway":"fd00:1::1","interface":0}`
	if withNet1 {
		ifs += `,{"name":"net1","sandbox":"` + f.path + `"}`
		ips += `,{"address":"192.168.1.209/24","gateway":"192.168.1.2","interface":1}`
	}
	return `{"cniVersion":"` + version + `","interfaces":[` + ifs + `],"ips":[` + ips + `],
		"routes":[{"dst":"0.0.0.0/0"},{"dst":"10.2.0.0/24","gw":"10.1.1.5"},{"dst":"::/0"}]}`
}

func conf(version, keys, prev string) string {
	return testutil.ChainedConf(testutil.Head(version, "sbrnet", "sbr"), keys, prev)
}

func env(cmd string, extra ...string) map[string]string {
	return testutil.EnvWith(map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": "ctr1", "CNI_IFNAME": "eth0"}, extra...)
}

// run invokes our plugin in-process. sbr works in the container's
// namespace only, so the "host" it runs in is the container's too: one per
// fixture, which keeps the attachment locks (per host namespace, skel) of
// parallel tests apart (they all use container ctr1, interface eth0).
func (f *fixture) run(cmd, config string, extra ...string) (string, int) {
	f.t.Helper()
	return testutil.RunPlugin(f.t, Plugin(), f.path, env(cmd, append([]string{"CNI_NETNS=" + f.path}, extra...)...), config)
}

func (f *fixture) mustRun(cmd, config string, extra ...string) string {
	f.t.Helper()
	out, code := f.run(cmd, config, extra...)
	if code != 0 {
		f.t.Fatalf("%s failed: %s", cmd, out)
	}
	return out
}

// runRef runs the reference sbr binary with the same inputs.
func (f *fixture) runRef(cmd, config string) (string, int) {
	f.t.Helper()
	return testutil.RunRefPlugin(f.t, "sbr", "", env(cmd, "CNI_NETNS="+f.path), config)
}

var expectError = testutil.ExpectCNIError

func jsonRoutes(t *testing.T, out string) []map[string]any {
	t.Helper()
	var r struct{ Routes []map[string]any }
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return r.Routes
}

func diff(a, b string) string {
	as, bs := strings.Split(a, "\n"), strings.Split(b, "\n")
	in := func(l string, ls []string) bool {
		for _, x := range ls {
			if x == l {
				return true
			}
		}
		return false
	}
	var out []string
	for _, l := range as {
		if !in(l, bs) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range bs {
		if !in(l, as) {
			out = append(out, "+ "+l)
		}
	}
	return fmt.Sprint(strings.Join(out, "\n"))
}
