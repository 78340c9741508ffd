package firewall

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// TestMain keeps the tests away from the machine's state (testutil.Run):
// the system bus the plugins see, unless a test starts its own, does not
// exist, so that "backend" left out never finds a firewalld of the
// machine's (and never programs the machine's firewall); records and locks
// go to a temporary run directory.
func TestMain(m *testing.M) { os.Exit(testutil.Run(m)) }

// node is a test "host" network namespace with a runtime driving plugins
// from binDir, a temp dir for IPAM data, records and the result cache.
type node struct {
	t              *testing.T
	mu             sync.Mutex
	name, path     string
	dir            string
	cni            *runtime.CNI
	containerNames map[string]string // container ID -> netns name
	containerPaths map[string]string
	caps           map[string]map[string]any // capability args of each container's ADD, passed again on DEL
}

// newNode makes the host netns with forwarding on, IPv6 DAD off, and the
// built-in FORWARD chains touched (iptables-nft creates them on first use
// and leaves them: touching them first lets DEL be compared with before).
func newNode(t *testing.T, binDirs ...string) *node {
	t.Helper()
	n := &node{t: t, dir: t.TempDir(), containerNames: map[string]string{}, containerPaths: map[string]string{}, caps: map[string]map[string]any{}}
	n.name, n.path = testutil.NewNS(t, "fwh")
	if len(binDirs) == 0 {
		binDirs = []string{testutil.OurBin(t)}
	}
	n.cni = &runtime.CNI{Path: binDirs, CacheDir: filepath.Join(n.dir, "cache"), Timeout: 60 * time.Second}
	for _, s := range []string{"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1", "net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.accept_dad=0"} {
		n.sh("sysctl", "-qw", s)
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		n.sh(tool, "-A", "FORWARD", "-j", "RETURN")
		n.sh(tool, "-D", "FORWARD", "-j", "RETURN")
	}
	return n
}

// sh runs a command in the host netns and fails the test on error.
func (n *node) sh(args ...string) string {
	n.t.Helper()
	out, err := testutil.InNS(n.t, n.name, args...)
	if err != nil {
		n.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

func (n *node) state() string { n.t.Helper(); return testutil.FirewallState(n.t, n.name) }

// list parses a conflist template: {{DIR}} is the node's temp dir.
func (n *node) list(tmpl string) *spec.ConfList {
	n.t.Helper()
	l, err := spec.ParseConfList([]byte(strings.ReplaceAll(tmpl, "{{DIR}}", n.dir)))
	if err != nil {
		n.t.Fatalf("parse conflist: %v\n%s", err, tmpl)
	}
	return l
}

// container returns the netns of container id, made on first use.
func (n *node) container(id string) string {
	n.t.Helper()
	if p, ok := n.containerPaths[id]; ok {
		return p
	}
	name, path := testutil.NewNS(n.t, "fwc")
	testutil.InNS(n.t, name, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
	n.containerNames[id], n.containerPaths[id] = name, path
	return path
}

func (n *node) rt(id string, caps map[string]any) *runtime.RuntimeConf {
	return &runtime.RuntimeConf{ContainerID: id, NetNS: n.container(id), IfName: "eth0", CapabilityArgs: caps}
}

func (n *node) in(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return netns.Do(n.path, func() error { return f(ctx) })
}

func (n *node) add(l *spec.ConfList, id string, caps map[string]any) (*spec.Result, error) {
	n.container(id)
	n.mu.Lock()
	n.caps[id] = caps
	n.mu.Unlock()
	var res *spec.Result
	err := n.in(func(ctx context.Context) (err error) {
		res, err = n.cni.AddNetworkList(ctx, l, n.rt(id, caps))
		return err
	})
	return res, err
}

func (n *node) mustAdd(l *spec.ConfList, id string, caps map[string]any) *spec.Result {
	n.t.Helper()
	res, err := n.add(l, id, caps)
	if err != nil {
		n.t.Fatalf("ADD %s %s: %v\n%s", l.Name, id, err, n.state())
	}
	return res
}

func (n *node) check(l *spec.ConfList, id string) error {
	return n.in(func(ctx context.Context) error { return n.cni.CheckNetworkList(ctx, l, n.rt(id, nil)) })
}

// del passes the capability args of the ADD again, as runtimes do.
func (n *node) del(l *spec.ConfList, id string) error {
	n.mu.Lock()
	caps := n.caps[id]
	n.mu.Unlock()
	return n.in(func(ctx context.Context) error { return n.cni.DelNetworkList(ctx, l, n.rt(id, caps)) })
}

func (n *node) mustDel(l *spec.ConfList, id string) {
	n.t.Helper()
	if err := n.del(l, id); err != nil {
		n.t.Fatalf("DEL %s %s: %v", l.Name, id, err)
	}
}

func (n *node) gc(l *spec.ConfList, valid ...string) error {
	var atts []spec.Attachment
	for _, id := range valid {
		atts = append(atts, spec.Attachment{ContainerID: id, IfName: "eth0"})
	}
	return n.in(func(ctx context.Context) error { return n.cni.GCNetworkList(ctx, l, atts) })
}

// ping reports whether container from reaches addr (one echo, 1 s).
func (n *node) ping(from, addr string) bool {
	n.t.Helper()
	out, err := testutil.InNS(n.t, n.containerNames[from], "ping", "-c1", "-W1", addr)
	_ = out
	return err == nil
}

// addrOf is the container's address of a family from an ADD result.
func addrOf(t *testing.T, res *spec.Result, v6 bool) string {
	t.Helper()
	for _, ip := range res.IPs {
		if ip.Address.Addr().Is6() == v6 {
			return ip.Address.Addr().String()
		}
	}
	t.Fatalf("no %v address in %+v", map[bool]string{false: "IPv4", true: "IPv6"}[v6], res.IPs)
	return ""
}

// bridgeFirewall is bridge (ours, host-local) + firewall with extra
// firewall keys; either subnet may be "" (single-stack).
func bridgeFirewall(version, name, br, sub4, sub6, fwKeys string) string {
	var sets []string
	for _, sub := range []string{sub4, sub6} {
		if sub != "" {
			sets = append(sets, fmt.Sprintf(`[{"subnet":%q}]`, sub))
		}
	}
	ranges := strings.Join(sets, ",")
	return fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[
 {"type":"bridge","bridge":%q,"isGateway":true,
  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","ranges":[%s],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"firewall","dataDir":"{{DIR}}/fw"%s}]}`, version, name, br, ranges, fwKeys)
}

// iptablesHas reports whether iptables-save (or ip6tables-save) of the
// filter table in the node holds a line containing every part.
func (n *node) iptablesHas(v6 bool, parts ...string) bool {
	n.t.Helper()
	tool := "iptables-save"
	if v6 {
		tool = "ip6tables-save"
	}
	for _, l := range strings.Split(n.sh(tool, "-t", "filter"), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// refFirewallDir is a CNI_PATH directory with our bridge and host-local
// and the reference's firewall v1.9.1.
func refFirewallDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ours, ref := testutil.OurBin(t), testutil.RefBin(t)
	for name, target := range map[string]string{
		"bridge": filepath.Join(ours, "bridge"), "host-local": filepath.Join(ours, "host-local"), "firewall": filepath.Join(ref, "firewall"),
	} {
		if _, err := os.Stat(target); err != nil {
			t.Fatalf("%s: %v (make build; make test-deps installs the reference plugins)", target, err)
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
