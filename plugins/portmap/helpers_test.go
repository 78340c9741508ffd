package portmap

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// The test binary doubles as the plugin executable (for strace and timing).
const asPluginEnv = "PATCHBAY_PORTMAP_TEST_AS_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(asPluginEnv) == "1" {
		skel.Main(Plugin())
	}
	os.Exit(testutil.Run(m))
}

// Addresses are documentation ranges, only ever assigned inside test netns.
const (
	hostClientIP4 = "198.51.100.1" // host side of the client link
	clientIP4     = "198.51.100.2"
	hostClientIP6 = "2001:db8:3::1"
	clientIP6     = "2001:db8:3::2"
)

type ctr struct {
	name, path string
	ip4, gw4   string // address in the container, host-side gateway
	ip6, gw6   string
	hostIf     string
}

type topo struct {
	host, hostPath     string
	client, clientPath string
	c                  []*ctr
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newTopo builds a "host" netns with a client netns and n container netns,
// each joined to the host by a veth pair, and forwarding on in the host.
func newTopo(t *testing.T, n int) *topo {
	t.Helper()
	tp := &topo{}
	tp.host, tp.hostPath = testutil.NewNS(t, "pmh")
	tp.client, tp.clientPath = testutil.NewNS(t, "pmx")
	noDAD(t, tp.host)
	noDAD(t, tp.client)
	link := func(peerNS, hostIf, h4, p4, h6, p6 string) {
		ipCmd(t, "-n", tp.host, "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", peerNS)
		ipCmd(t, "-n", tp.host, "addr", "add", h4+"/24", "dev", hostIf)
		ipCmd(t, "-n", tp.host, "addr", "add", h6+"/64", "dev", hostIf, "nodad")
		ipCmd(t, "-n", tp.host, "link", "set", hostIf, "up")
		ipCmd(t, "-n", peerNS, "addr", "add", p4+"/24", "dev", "eth0")
		ipCmd(t, "-n", peerNS, "addr", "add", p6+"/64", "dev", "eth0", "nodad")
		ipCmd(t, "-n", peerNS, "link", "set", "eth0", "up")
		ipCmd(t, "-n", peerNS, "route", "add", "default", "via", h4)
		ipCmd(t, "-n", peerNS, "-6", "route", "add", "default", "via", h6)
	}
	link(tp.client, "hx", hostClientIP4, clientIP4, hostClientIP6, clientIP6)
	for i := 0; i < n; i++ {
		c := &ctr{
			ip4: fmt.Sprintf("192.0.2.%d", 10+i*16+2), gw4: fmt.Sprintf("192.0.2.%d", 10+i*16+1),
			ip6: fmt.Sprintf("2001:db8:%d::2", 10+i), gw6: fmt.Sprintf("2001:db8:%d::1", 10+i),
			hostIf: fmt.Sprintf("hc%d", i),
		}
		c.name, c.path = testutil.NewNS(t, fmt.Sprintf("pmc%d", i))
		noDAD(t, c.name)
		// /28 subnets so that each container has its own.
		ipCmd(t, "-n", tp.host, "link", "add", c.hostIf, "type", "veth", "peer", "name", "eth0", "netns", c.name)
		ipCmd(t, "-n", tp.host, "addr", "add", c.gw4+"/28", "dev", c.hostIf)
		ipCmd(t, "-n", tp.host, "addr", "add", c.gw6+"/64", "dev", c.hostIf, "nodad")
		ipCmd(t, "-n", tp.host, "link", "set", c.hostIf, "up")
		ipCmd(t, "-n", c.name, "addr", "add", c.ip4+"/28", "dev", "eth0")
		ipCmd(t, "-n", c.name, "addr", "add", c.ip6+"/64", "dev", "eth0", "nodad")
		ipCmd(t, "-n", c.name, "link", "set", "eth0", "up")
		ipCmd(t, "-n", c.name, "route", "add", "default", "via", c.gw4)
		ipCmd(t, "-n", c.name, "-6", "route", "add", "default", "via", c.gw6)
		tp.c = append(tp.c, c)
	}
	for _, s := range []string{"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"} {
		if out, err := testutil.InNS(t, tp.host, "sysctl", "-qw", s); err != nil {
			t.Fatalf("sysctl %s: %v: %s", s, err, out)
		}
	}
	return tp
}

// noDAD turns off IPv6 duplicate address detection for links created later
// in the netns: a tentative link-local address delays neighbour discovery
// and so the first forwarded packets.
func noDAD(t *testing.T, ns string) {
	t.Helper()
	for _, s := range []string{"net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.accept_dad=0"} {
		if out, err := testutil.InNS(t, ns, "sysctl", "-qw", s); err != nil {
			t.Fatalf("sysctl %s: %v: %s", s, err, out)
		}
	}
}

// prevResult is what a main plugin would have returned for c.
func (c *ctr) prevResult() map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0",
		"interfaces": []map[string]any{{"name": c.hostIf}, {"name": "eth0", "sandbox": c.path}},
		"ips": []map[string]any{
			{"address": c.ip4 + "/28", "gateway": c.gw4, "interface": 1},
			{"address": c.ip6 + "/64", "gateway": c.gw6, "interface": 1},
		},
	}
}

// netConf builds a portmap config; extra keys are merged in.
func netConf(t *testing.T, prev map[string]any, maps []spec.PortMapping, extra map[string]any) []byte {
	t.Helper()
	m := map[string]any{"cniVersion": "1.0.0", "name": "pmtest", "type": "portmap"}
	if prev != nil {
		m["prevResult"] = prev
	}
	if maps != nil {
		m["runtimeConfig"] = map[string]any{"portMappings": maps}
	}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runIn runs the plugin in-process inside the netns at nsPath and returns
// stdout and the exit code.
func runIn(t *testing.T, nsPath, cmd, cid, ifname, cnetns string, conf []byte) (string, int) {
	t.Helper()
	env := skel.Env{"CNI_COMMAND": cmd, "CNI_CONTAINERID": cid, "CNI_IFNAME": ifname, "CNI_NETNS": cnetns, "CNI_PATH": "/nonexistent"}
	var out, stderr bytes.Buffer
	code := -1
	if err := netns.Do(nsPath, func() error {
		code = skel.Run(context.Background(), Plugin(), env, bytes.NewReader(conf), &out, &stderr)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out.String() + stderr.String(), code
}

func mustRun(t *testing.T, nsPath, cmd, cid, ifname, cnetns string, conf []byte) string {
	t.Helper()
	out, code := runIn(t, nsPath, cmd, cid, ifname, cnetns, conf)
	if code != 0 {
		t.Fatalf("%s %s: exit %d: %s", cmd, cid, code, out)
	}
	return out
}

// serve listens on port in the netns and answers every connection with
// "<tag> <remote address>".
func serve(t *testing.T, nsPath, network, addr, tag string) {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(nsPath, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s %s\n", tag, c.RemoteAddr().(*net.TCPAddr).IP)
			c.Close()
		}
	}()
}

// dial connects from the netns and returns the server's line, or an error.
func dial(nsPath, addr string) (string, error) {
	var line string
	err := netns.Do(nsPath, func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	return strings.TrimSpace(line), err
}

func expectDial(t *testing.T, what, nsPath, addr, want string) {
	t.Helper()
	got, err := dial(nsPath, addr)
	if err != nil {
		t.Fatalf("%s: dial %s: %v", what, addr, err)
	}
	if got != want {
		t.Fatalf("%s: dial %s: got %q, want %q", what, addr, got, want)
	}
}

func expectNoDial(t *testing.T, what, nsPath, addr string) {
	t.Helper()
	if got, err := dial(nsPath, addr); err == nil {
		t.Fatalf("%s: dial %s unexpectedly answered %q", what, addr, got)
	}
}

func ruleset(t *testing.T, ns string) string {
	t.Helper()
	out, err := testutil.InNS(t, ns, "nft", "list", "ruleset")
	if err != nil {
		t.Fatalf("nft list ruleset: %v: %s", err, out)
	}
	return out
}

func natRules(t *testing.T, ns string, v6 bool) string {
	t.Helper()
	tool := "iptables-save"
	if v6 {
		tool = "ip6tables-save"
	}
	out, err := testutil.InNS(t, ns, tool, "-t", "nat")
	if err != nil {
		t.Fatalf("%s: %v: %s", tool, err, out)
	}
	return out
}
