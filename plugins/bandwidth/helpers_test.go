package bandwidth

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// Addresses are documentation / ULA ranges, only ever assigned inside the
// test's own namespaces.
const (
	hostIP4 = "198.51.100.1"
	contIP4 = "198.51.100.2"
	hostIP6 = "fd00:bd::1"
	contIP6 = "fd00:bd::2"
	netName = "bwnet"
)

// fixture is a test "host" namespace (where the plugin runs) and a
// container namespace joined by a veth pair: hv0 on the host, eth0 in the
// container, both with addresses, as bridge or ptp leave them.
type fixture struct {
	t                  *testing.T
	host, hostPath     string
	cont, contPath     string
	hostMAC, contMAC   string
	id                 string // CNI_CONTAINERID
	ifb                string // the ifb device name for (netName, id)
	hostIf, contIfName string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, id: "ctr-bw1", hostIf: "hv0", contIfName: "eth0"}
	f.host, f.hostPath = testutil.NewNS(t, "bwh")
	f.cont, f.contPath = testutil.NewNS(t, "bwc")
	f.ifb = ifbName(netName, f.id)
	for _, ns := range []string{f.host, f.cont} {
		f.sh(ns, "sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0")
	}
	f.ip(f.host, "link", "add", f.hostIf, "type", "veth", "peer", "name", f.contIfName, "netns", f.cont)
	f.ip(f.host, "addr", "add", hostIP4+"/24", "dev", f.hostIf)
	f.ip(f.host, "addr", "add", hostIP6+"/64", "dev", f.hostIf, "nodad")
	f.ip(f.host, "link", "set", f.hostIf, "up")
	f.ip(f.cont, "addr", "add", contIP4+"/24", "dev", f.contIfName)
	f.ip(f.cont, "addr", "add", contIP6+"/64", "dev", f.contIfName, "nodad")
	f.ip(f.cont, "link", "set", f.contIfName, "up")
	f.hostMAC = f.linkJSON(f.host, f.hostIf)["address"].(string)
	f.contMAC = f.linkJSON(f.cont, f.contIfName)["address"].(string)
	return f
}

func (f *fixture) ip(ns string, args ...string) {
	f.t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
		f.t.Fatalf("ip -n %s %s: %v: %s", ns, strings.Join(args, " "), err, out)
	}
}

func (f *fixture) sh(ns, script string) string {
	f.t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", script).CombinedOutput()
	if err != nil {
		f.t.Fatalf("in %s: %s: %v: %s", ns, script, err, out)
	}
	return string(out)
}

// jsonOut runs a command printing JSON (ip -j, tc -j) in ns.
func (f *fixture) jsonOut(ns, script string) []map[string]any {
	f.t.Helper()
	out := strings.TrimSpace(f.sh(ns, script))
	if out == "" {
		return nil
	}
	var v []map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		f.t.Fatalf("%s: %v: %s", script, err, out)
	}
	return v
}

func (f *fixture) linkJSON(ns, name string) map[string]any {
	f.t.Helper()
	ls := f.jsonOut(ns, "ip -d -j link show dev "+name)
	if len(ls) != 1 {
		f.t.Fatalf("link %s in %s: %v", name, ns, ls)
	}
	return ls[0]
}

func (f *fixture) hasLink(ns, name string) bool {
	return exec.Command("ip", "-n", ns, "link", "show", "dev", name).Run() == nil
}

// qdiscs are tc's view of a device's qdiscs in the host namespace.
func (f *fixture) qdiscs(dev string) []map[string]any {
	f.t.Helper()
	return f.jsonOut(f.host, "tc -j qdisc show dev "+dev)
}

// rootKind is the kind and handle of a device's root qdisc, as tc shows it.
func (f *fixture) rootKind(dev string) string {
	f.t.Helper()
	for _, q := range f.qdiscs(dev) {
		if q["root"] == true {
			return q["kind"].(string) + " " + q["handle"].(string)
		}
	}
	return "none"
}

func (f *fixture) hasIngressQdisc(dev string) bool {
	f.t.Helper()
	for _, q := range f.qdiscs(dev) {
		if q["kind"] == "ingress" {
			return true
		}
	}
	return false
}

// prevResult is what ptp leaves: the host veth and the container's eth0
// with its addresses.
func (f *fixture) prevResult(version string) string {
	if spec.Compare(version, spec.V030) < 0 {
		return `{"cniVersion":"` + version + `","ip4":{"ip":"` + contIP4 + `/24","gateway":"` + hostIP4 + `"},"ip6":{"ip":"` + contIP6 + `/64"}}`
	}
	return `{"cniVersion":"` + version + `",
		"interfaces":[{"name":"` + f.hostIf + `","mac":"` + f.hostMAC + `"},{"name":"` + f.contIfName + `","mac":"` + f.contMAC + `","sandbox":"` + f.contPath + `"}],
		"ips":[{"address":"` + contIP4 + `/24","gateway":"` + hostIP4 + `","interface":1},{"address":"` + contIP6 + `/64","interface":1}],
		"routes":[{"dst":"0.0.0.0/0"}]}`
}

// conf builds a bandwidth config with plugin keys (JSON body without
// braces) and, when prev is not empty, a prevResult.
func conf(version, keys, prev string) string {
	return testutil.ChainedConf(testutil.Head(version, netName, "bandwidth"), keys, prev)
}

// env is the CNI_* environment of the fixture's attachment, with extra
// KEY=VALUE entries on top.
func (f *fixture) env(cmd string, extra ...string) map[string]string {
	return testutil.EnvWith(map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": f.id, "CNI_NETNS": f.contPath, "CNI_IFNAME": f.contIfName}, extra...)
}

// run invokes our plugin in-process inside the host namespace.
func (f *fixture) run(cmd, config string, extra ...string) (string, int) {
	f.t.Helper()
	return testutil.RunPlugin(f.t, Plugin(), f.hostPath, f.env(cmd, extra...), config)
}

func (f *fixture) mustRun(cmd, config string, extra ...string) string {
	f.t.Helper()
	out, code := f.run(cmd, config, extra...)
	if code != 0 {
		f.t.Fatalf("%s failed: %s", cmd, out)
	}
	return out
}

// runRef runs the reference bandwidth binary in the host namespace.
func (f *fixture) runRef(cmd, config string) (string, int) {
	f.t.Helper()
	return testutil.RunRefPlugin(f.t, "bandwidth", f.host, f.env(cmd), config)
}

var expectError = testutil.ExpectCNIError

// hostState is everything the plugin could have changed in the host
// namespace: links (with alias and qdisc) and every qdisc and filter.
func (f *fixture) hostState() string {
	f.t.Helper()
	// stdout only: ip may complain on stderr about other tests' namespaces
	// vanishing while it names link-netns peers.
	out, err := exec.Command("ip", "netns", "exec", f.host, "sh", "-c",
		`ip -o link show | sed 's/^[0-9]*: //; s/ link-netns.*//'; tc qdisc show; for d in $(ls /sys/class/net); do tc filter show dev $d ingress 2>/dev/null; done`).Output()
	if err != nil {
		f.t.Fatalf("host state: %v", err)
	}
	return string(out)
}
