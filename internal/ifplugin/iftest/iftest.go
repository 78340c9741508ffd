// Package iftest is the test harness of the interface plugins built on
// ifplugin (macvlan, ipvlan, vlan, dummy): a test "host" namespace with
// master links, container namespaces, the plugin run in-process through
// the SDK inside the host namespace (our host-local from bin/ as IPAM),
// state snapshots, traffic, and Contract, the tests every such plugin
// must pass (on this machine's kernel or inside the test VM).
package iftest

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Env is one test's host namespace and the plugin under test.
type Env struct {
	T        *testing.T
	Plugin   skel.Plugin
	Host     string // host netns name
	HostPath string
	DataDir  string // host-local's dataDir
	CNIPath  string
	// Env is extra environment for every invocation (e.g. CNI_ARGS).
	Env map[string]string
}

// With returns e for subtest t (failures go to t).
func (e *Env) With(t *testing.T) *Env {
	c := *e
	c.T = t
	return &c
}

// New makes a host namespace for plugin p.
func New(t *testing.T, p skel.Plugin) *Env {
	t.Helper()
	PrimeLinkTypes(t)
	host, hostPath := testutil.NewNS(t, "ifh")
	return &Env{T: t, Plugin: p, Host: host, HostPath: hostPath, DataDir: t.TempDir(), CNIPath: testutil.OurBin(t), Env: map[string]string{}}
}

// Master makes a veth pair name/name+"p" in the host namespace, both ends
// up (so links on name have carrier), with the given MTU (0: default).
func (e *Env) Master(name string, mtu int) {
	e.T.Helper()
	args := []string{"link", "add", name}
	if mtu > 0 {
		args = append(args, "mtu", fmt.Sprint(mtu))
	}
	args = append(args, "type", "veth", "peer", "name", name+"p")
	if mtu > 0 {
		args = append(args, "mtu", fmt.Sprint(mtu))
	}
	IP(e.T, e.Host, args...)
	IP(e.T, e.Host, "link", "set", name, "up")
	IP(e.T, e.Host, "link", "set", name+"p", "up")
}

// Container makes a container namespace.
func (e *Env) Container() (string, string) {
	e.T.Helper()
	return testutil.NewNS(e.T, "ifc")
}

// IP runs `ip -n ns args...`, failing the test on error.
func IP(t testing.TB, ns string, args ...string) string {
	t.Helper()
	return In(t, ns, append([]string{"ip"}, args...)...)
}

// In runs a command inside a namespace, failing the test on error.
func In(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, err := testutil.InNS(t, ns, args...)
	if err != nil {
		t.Fatalf("%s in %s: %v: %s", strings.Join(args, " "), ns, err, out)
	}
	return out
}

// Conf builds a configuration of the plugin: cniVersion, name "testnet",
// type, keys, then host-local over subnets (none: no "ipam").
func (e *Env) Conf(version string, keys map[string]any, subnets ...string) string {
	e.T.Helper()
	c := map[string]any{"cniVersion": version, "name": "testnet", "type": e.Plugin.Type}
	if len(subnets) > 0 {
		c["ipam"] = testutil.HostLocal(e.DataDir, subnets)
	}
	return testutil.Conf(e.T, c, keys)
}

// Set returns conf with key set to v (v nil: removed).
func Set(t testing.TB, conf, key string, v any) string {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal([]byte(conf), &c); err != nil {
		t.Fatal(err)
	}
	if v == nil {
		delete(c, key)
	} else {
		c[key] = v
	}
	b, _ := json.Marshal(c)
	return string(b)
}

// WithPrev adds prevResult to conf.
func WithPrev(t testing.TB, conf, prev string) string {
	t.Helper()
	return Set(t, conf, "prevResult", json.RawMessage(prev))
}

// Run executes one verb of the plugin inside the host namespace and
// returns its stdout and exit code.
func (e *Env) Run(cmd, conf, id, nsPath, ifname string) (string, int) {
	e.T.Helper()
	env := map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": id, "CNI_NETNS": nsPath, "CNI_IFNAME": ifname, "CNI_PATH": e.CNIPath}
	for k, v := range e.Env {
		env[k] = v
	}
	return testutil.RunPlugin(e.T, e.Plugin, e.HostPath, env, conf)
}

// Add runs ADD, which must succeed, and decodes its result (also
// returned as printed).
func (e *Env) Add(conf, id, nsPath, ifname string) (*spec.Result, string) {
	e.T.Helper()
	out, code := e.Run(spec.CmdAdd, conf, id, nsPath, ifname)
	if code != 0 {
		e.T.Fatalf("ADD %s: exit %d: %s", id, code, out)
	}
	r, err := spec.ParseResult([]byte(out), "")
	if err != nil {
		e.T.Fatalf("decode ADD result: %v: %s", err, out)
	}
	return r, strings.TrimSpace(out)
}

// OK runs a verb that must succeed.
func (e *Env) OK(cmd, conf, id, nsPath, ifname string) {
	e.T.Helper()
	if out, code := e.Run(cmd, conf, id, nsPath, ifname); code != 0 {
		e.T.Fatalf("%s %s: exit %d: %s", cmd, id, code, out)
	}
}

// Fails runs a verb that must fail and returns its CNI error.
func (e *Env) Fails(cmd, conf, id, nsPath, ifname string) *spec.Error {
	e.T.Helper()
	out, code := e.Run(cmd, conf, id, nsPath, ifname)
	if code == 0 {
		e.T.Fatalf("%s %s succeeded, want an error: %s", cmd, id, out)
	}
	ce, ok := spec.ParseError([]byte(out))
	if !ok {
		e.T.Fatalf("%s %s: not a CNI error: %s", cmd, id, out)
	}
	return ce
}

// Allocated lists the addresses host-local holds for testnet.
func (e *Env) Allocated() []string {
	m, _ := filepath.Glob(filepath.Join(e.DataDir, "testnet", "*"))
	var out []string
	for _, f := range m {
		b := filepath.Base(f)
		if b != "lock" && !strings.HasPrefix(b, "last_reserved") && !strings.HasPrefix(b, ".") {
			out = append(out, b)
		}
	}
	sort.Strings(out)
	return out
}

// State is the links, addresses and routes of a namespace as sorted
// lines, for comparing before and after; what changes by itself (link
// state and carrier, IPv6 link-local addresses, their routes and the
// multicast routes, address lifetimes) is left out. Read over netlink: no process start, which
// matters inside the VM.
func State(t testing.TB, ns string) string {
	t.Helper()
	n, err := link.Open("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var lines []string
	links, err := n.H.LinkList()
	if err != nil {
		t.Fatalf("list links in %s: %v", ns, err)
	}
	for _, l := range links {
		a := l.Attrs()
		lines = append(lines, fmt.Sprintf("link %d %s %s mtu %d mac %s parent %d/%d master %d flags %v txq %d",
			a.Index, a.Name, l.Type(), a.MTU, a.HardwareAddr, a.ParentIndex, a.NetNsID, a.MasterIndex, a.Flags&net.FlagUp, a.TxQLen))
	}
	addrs, err := n.H.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatalf("list addresses in %s: %v", ns, err)
	}
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			lines = append(lines, fmt.Sprintf("addr %d %s scope %d", a.LinkIndex, a.IPNet, a.Scope))
		}
	}
	routes, err := n.H.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatalf("list routes in %s: %v", ns, err)
	}
	for _, r := range routes {
		if (r.Dst != nil && r.Dst.IP.IsLinkLocalUnicast()) || r.Type == unix.RTN_MULTICAST {
			continue // the kernel adds these as IPv6 comes up on a link
		}
		lines = append(lines, fmt.Sprintf("route table %d dst %v gw %v dev %d scope %d type %d proto %d prio %d", r.Table, r.Dst, r.Gw, r.LinkIndex, r.Scope, r.Type, r.Protocol, r.Priority))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

// Ping reports whether a ping from ns reaches addr: up to tries
// attempts of two seconds each (more than one where the answer is
// expected: the first packet may be lost while a neighbour entry or an
// address comes up, more so under QEMU without KVM).
func Ping(t testing.TB, ns, addr string, tries int) bool {
	t.Helper()
	for range tries {
		if _, err := testutil.InNS(t, ns, "ping", "-c", "1", "-W", "2", addr); err == nil {
			return true
		}
	}
	return false
}

// Exists reports whether a link called name is in ns.
func Exists(t testing.TB, ns, name string) bool {
	t.Helper()
	_, err := testutil.InNS(t, ns, "ip", "link", "show", "dev", name)
	return err == nil
}

// RemoveNS deletes a namespace now (NewNS's cleanup tolerates that).
func RemoveNS(t testing.TB, name string) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del %s: %v: %s", name, err, out)
	}
}

// testutilIP runs `ip` in a namespace and returns its error instead of
// failing the test (for changes a kernel may refuse).
func testutilIP(t testing.TB, ns string, args ...string) (string, error) {
	t.Helper()
	return testutil.InNS(t, ns, append([]string{"ip"}, args...)...)
}

var primeOnce sync.Once

// PrimeLinkTypes makes one link of each type the interface plugins use
// (veth, macvlan, ipvlan, vlan, dummy), one after the other, in a
// throwaway namespace, so their kernel modules are loaded before tests
// run in parallel: the test VM's kernel loads them on first use, and a
// link made while its module is still loading fails ("Unknown device
// type"). Once per process; a type the kernel lacks is logged, not fatal.
func PrimeLinkTypes(t testing.TB) {
	t.Helper()
	if !vmtest.InVM() {
		return // this machine's kernel has what it has, loaded
	}
	primeOnce.Do(func() {
		ns, _ := testutil.NewNS(t, "prime")
		for _, args := range [][]string{
			{"link", "add", "p0", "type", "veth", "peer", "name", "p1"},
			{"link", "add", "link", "p0", "name", "mv0", "type", "macvlan"},
			{"link", "add", "link", "p1", "name", "iv0", "type", "ipvlan"},
			{"link", "add", "link", "p0", "name", "vl0", "type", "vlan", "id", "2"},
			{"link", "add", "dm0", "type", "dummy"},
		} {
			if out, err := testutilIP(t, ns, args...); err != nil {
				t.Logf("priming link types: ip %v: %v: %s", args, err, out)
			}
		}
		RemoveNS(t, ns)
	})
}
