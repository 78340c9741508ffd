package dhcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/launch"
	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// lab is one DHCP test network: a "host" namespace holding a bridge with
// the server address and Debian's dnsmasq serving DHCP on it, our daemon
// (a process of bin/dhcp, started and stopped by PID), and container
// namespaces attached to the bridge. Every test builds its own; nothing
// touches the machine's namespace, and all traffic stays inside these
// namespaces.
type lab struct {
	t        testing.TB
	host     string // host netns name
	hostPath string
	dir      string
	bridge   string
	leases   string // dnsmasq's lease file
	srvLog   string // dnsmasq's log
	dnsmasq  *proc
	daemon   *proc
	sock     string
	state    string
	dlog     string // the daemon's log
	cni      *runtime.CNI
	n        int // veths made
}

const (
	labServer = "10.99.0.1"
	labNet    = "dhcpnet"
)

// serverOpts shape dnsmasq.
type serverOpts struct {
	t1, t2 time.Duration // option 58/59 forced (0: dnsmasq's own T1/T2)
	extra  []string
	none   bool // no dnsmasq: the test serves DHCP itself
}

func newLab(t testing.TB, so serverOpts) *lab {
	t.Helper()
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("dnsmasq"); err != nil {
		t.Fatalf("dnsmasq is not installed: `make test-deps` installs Debian's dnsmasq-base (%v)", err)
	}
	l := &lab{t: t, dir: t.TempDir(), bridge: "pbdhcp0"}
	l.host, l.hostPath = testutil.NewNS(t, "dhh")
	l.leases = filepath.Join(l.dir, "dnsmasq.leases")
	l.srvLog = filepath.Join(l.dir, "dnsmasq.log")
	l.sock = filepath.Join(l.dir, "run", "dhcp.sock")
	l.state = filepath.Join(l.dir, "state")
	l.dlog = filepath.Join(l.dir, "daemon.log")
	l.cni = &runtime.CNI{Path: []string{testutil.OurBin(t)}, CacheDir: filepath.Join(l.dir, "cache")}
	l.ip("link", "add", l.bridge, "type", "bridge")
	l.ip("addr", "add", labServer+"/24", "dev", l.bridge)
	l.ip("link", "set", l.bridge, "up")
	if !so.none {
		l.startServer(so)
	}
	return l
}

// ip runs `ip` in the host namespace.
func (l *lab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", l.host}, args...)...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip -n %s %s: %v: %s", l.host, strings.Join(args, " "), err, out)
	}
}

// proc is a process a test started through internal/launch: it dies with
// the test binary even when that is killed, and stop ends it by PID within
// a bound.
type proc struct {
	name string
	p    *launch.Process
}

// start runs argv inside the host namespace (ip netns exec execs in place,
// so the PID is the program's), output to logFile, stopped at cleanup.
func (l *lab) start(name, logFile string, argv ...string) *proc {
	l.t.Helper()
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("ip", append([]string{"netns", "exec", l.host}, argv...)...)
	cmd.Stdout, cmd.Stderr = f, f
	lp, err := launch.Start(cmd)
	if err != nil {
		l.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, p: lp}
	l.t.Cleanup(func() { p.stop(l.t, syscall.SIGTERM) })
	return p
}

// stop sends sig to the process and waits for its end (launch's Stop:
// SIGKILL after 10 s, then a bounded wait). SIGTERM is a clean stop:
// anything but exit status 0 is a failure (e.g. the race detector's 66).
// Calling it again does nothing.
func (p *proc) stop(t testing.TB, sig syscall.Signal) {
	if done, _ := p.p.Exited(); done {
		return
	}
	if err := p.p.Stop(p.name, 10*time.Second, func() error { return p.p.Cmd.Process.Signal(sig) }); err != nil {
		t.Error(err)
		return
	}
	if st := p.p.Cmd.ProcessState; sig == syscall.SIGTERM && st != nil && !st.Success() {
		t.Errorf("%s (pid %d) stopped by SIGTERM: %v", p.name, p.p.Pid(), st)
	}
}

func (l *lab) startServer(so serverOpts) {
	l.t.Helper()
	args := []string{"dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--user=root", "--group=root",
		"--port=0", "--no-resolv", "--no-hosts", "--interface=" + l.bridge, "--bind-interfaces",
		// dnsmasq pings an address before offering it and blocks up to 3 s
		// waiting for the echo: a server-side cost that would dominate
		// every ADD here (the addresses are known free).
		"--no-ping",
		"--dhcp-range=10.99.0.10,10.99.0.200,255.255.255.0,2m",
		"--dhcp-option=option:router," + labServer,
		"--dhcp-option=option:dns-server," + labServer,
		"--dhcp-option=option:domain-name,pb.test",
		"--dhcp-option=option:domain-search,pb.test,corp.test",
		"--dhcp-leasefile=" + l.leases, "--log-dhcp", "--log-facility=" + l.srvLog, "--pid-file="}
	if so.t1 > 0 {
		args = append(args, fmt.Sprintf("--dhcp-option-force=option:T1,%d", int(so.t1.Seconds())),
			fmt.Sprintf("--dhcp-option-force=option:T2,%d", int(so.t2.Seconds())))
	}
	args = append(args, so.extra...)
	l.dnsmasq = l.start("dnsmasq", filepath.Join(l.dir, "dnsmasq.out"), args...)
	l.waitFor("dnsmasq to listen", 10*time.Second, func() bool {
		return strings.Contains(readFile(l.srvLog), "DHCP, sockets bound")
	})
}

// startDaemon runs `dhcp daemon` with our flags plus extra.
func (l *lab) startDaemon(extra ...string) {
	l.t.Helper()
	argv := append([]string{filepath.Join(testutil.OurBin(l.t), "dhcp"), "daemon", "-socketpath", l.sock,
		"-statedir", l.state, "-timeout", "1s", "-resendtimeout", "20s", "-loglevel", "debug"}, extra...)
	l.daemon = l.start("dhcp daemon", l.dlog, argv...)
	l.waitFor("the daemon's socket", 10*time.Second, func() bool {
		_, err := os.Stat(l.sock)
		return err == nil
	})
	l.t.Cleanup(func() {
		if l.t.Failed() {
			l.t.Logf("daemon log:\n%s\ndnsmasq log:\n%s", readFile(l.dlog), readFile(l.srvLog))
		}
	})
}

// startRefDaemon runs the reference dhcp daemon v1.9.1 on its own socket
// (its log in ref-daemon.log); it returns the reference binary (its plugin
// too) and the socket.
func (l *lab) startRefDaemon() (bin, sock string) {
	l.t.Helper()
	sock = filepath.Join(l.dir, "ref", "dhcp.sock")
	bin = filepath.Join(testutil.RefBin(l.t), "dhcp")
	l.start("reference dhcp daemon", filepath.Join(l.dir, "ref-daemon.log"), bin, "daemon", "-socketpath", sock)
	l.waitFor("the reference daemon's socket", 10*time.Second, func() bool { return fileExists(sock) })
	return bin, sock
}

func (l *lab) waitFor(what string, d time.Duration, ok func() bool) {
	l.t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			l.t.Fatalf("timed out after %v waiting for %s\ndaemon log:\n%s\ndnsmasq log:\n%s", d, what, readFile(l.dlog), readFile(l.srvLog))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// container is a container namespace with an interface on the lab's bridge
// made by the test (a veth; its host end is enslaved to the bridge), as an
// interface plugin would make it before calling IPAM.
type container struct {
	name, path, ifName string
	hostEnd            string
}

func (l *lab) container(ifName string) *container {
	l.t.Helper()
	name, path := testutil.NewNS(l.t, "dhc")
	l.n++
	c := &container{name: name, path: path, ifName: ifName, hostEnd: fmt.Sprintf("dh%dh", l.n)}
	l.ip("link", "add", c.hostEnd, "type", "veth", "peer", "name", ifName, "netns", name)
	l.ip("link", "set", c.hostEnd, "master", l.bridge, "up")
	return c
}

// up sets the container's interface up and waits until it transmits
// (operstate UP). The reference daemon sends its first DISCOVER on a link it
// just set up, loses it and waits 10 s: tests that are not about that hand
// it an interface that is up already.
func (l *lab) up(c *container) {
	l.t.Helper()
	if out, err := exec.Command("ip", "-n", c.name, "link", "set", c.ifName, "up").CombinedOutput(); err != nil {
		l.t.Fatalf("set %s up: %v: %s", c.ifName, err, out)
	}
	l.waitFor(c.ifName+" operstate up", 5*time.Second, func() bool {
		out, _ := exec.Command("ip", "-n", c.name, "-o", "link", "show", c.ifName).CombinedOutput()
		return strings.Contains(string(out), "state UP")
	})
}

// configure puts the leased address on the interface, as the interface
// plugin does after IPAM answers (the server's unicast replies need it).
func (c *container) configure(t testing.TB, p netip.Prefix) {
	t.Helper()
	if out, err := exec.Command("ip", "-n", c.name, "addr", "add", p.String(), "dev", c.ifName).CombinedOutput(); err != nil {
		t.Fatalf("configure %s: %v: %s", p, err, out)
	}
}

// deleteIface removes the container's interface (as the interface plugin's
// DEL or the namespace's deletion does).
func (c *container) deleteIface(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("ip", "-n", c.name, "link", "del", c.ifName).CombinedOutput(); err != nil {
		t.Fatalf("delete %s: %v: %s", c.ifName, err, out)
	}
}

// ipamConf is a config with dhcp as the plugin itself (the IPAM plugin run
// directly, as an interface plugin would delegate to it).
func (l *lab) ipamConf(version string, ipam map[string]any) string {
	l.t.Helper()
	i := map[string]any{"type": "dhcp", "daemonSocketPath": l.sock}
	for k, v := range ipam {
		i[k] = v
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": version, "name": labNet, "type": "dhcp", "ipam": i})
	return string(b)
}

// plugin runs bin/dhcp (or another binary) as a CNI plugin.
type pluginCall struct {
	bin, cmd, id, netns, ifName, args string
}

// exec runs the call (testutil.RunBinary, outside any namespace: the
// plugin only talks to its daemon) and returns stdout and the exit code.
func (l *lab) exec(c pluginCall, conf string) (string, int) {
	l.t.Helper()
	if c.bin == "" {
		c.bin = filepath.Join(testutil.OurBin(l.t), "dhcp")
	}
	env := map[string]string{"CNI_COMMAND": c.cmd, "CNI_CONTAINERID": c.id, "CNI_NETNS": c.netns,
		"CNI_IFNAME": c.ifName, "CNI_PATH": filepath.Dir(c.bin), "CNI_ARGS": c.args}
	return testutil.RunBinary(l.t, c.bin, "", env, conf)
}

// run is exec with a failed call as an error naming its output.
func (l *lab) run(c pluginCall, conf string) (string, error) {
	l.t.Helper()
	out, rc := l.exec(c, conf)
	if rc != 0 {
		return out, fmt.Errorf("%s: exit %d: %s", c.cmd, rc, out)
	}
	return out, nil
}

// want runs the call expecting a CNI error with code whose message
// mentions every part (testutil.ExpectCNIError).
func (l *lab) want(c pluginCall, conf string, code uint, parts ...string) {
	l.t.Helper()
	out, rc := l.exec(c, conf)
	testutil.ExpectCNIError(l.t, out, rc, int(code), parts...)
}

// add runs ADD for the container and decodes the result.
func (l *lab) add(c *container, id, conf, args string) *spec.Result {
	l.t.Helper()
	out, err := l.run(pluginCall{cmd: "ADD", id: id, netns: c.path, ifName: c.ifName, args: args}, conf)
	if err != nil {
		l.t.Fatal(err)
	}
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	json.Unmarshal([]byte(out), &v)
	res, err := spec.ParseResult([]byte(out), v.CNIVersion)
	if err != nil {
		l.t.Fatalf("decode ADD result: %v\n%s", err, out)
	}
	return res
}

// serverLease returns dnsmasq's lease file line for addr ("" if none):
// "expiry mac ip hostname client-id".
func (l *lab) serverLease(addr netip.Addr) string {
	sc := bufio.NewScanner(strings.NewReader(readFile(l.leases)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[2] == addr.String() {
			return sc.Text()
		}
	}
	return ""
}

// serverExpiry is the expiry time dnsmasq records for addr.
func (l *lab) serverExpiry(addr netip.Addr) int64 {
	var exp int64
	fmt.Sscan(strings.Fields(l.serverLease(addr) + " 0")[0], &exp)
	return exp
}

// count counts log lines matching re.
func count(log, re string) int {
	return len(regexp.MustCompile(re).FindAllStringIndex(log, -1))
}

// nft runs nft in the host namespace (test-only: a server that stops
// answering is simulated by dropping its input).
func (l *lab) nft(rules string) {
	l.t.Helper()
	cmd := exec.Command("ip", "netns", "exec", l.host, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("nft: %v: %s\n%s", err, out, rules)
	}
}

// nftCounter reads the packets counter of the rule commented name.
func (l *lab) nftCounter(name string) int {
	l.t.Helper()
	out, err := testutil.InNS(l.t, l.host, "nft", "list", "table", "inet", "dhcptest")
	if err != nil {
		l.t.Fatalf("nft list: %v: %s", err, out)
	}
	m := regexp.MustCompile(`counter packets (\d+) bytes \d+ .*comment "` + name + `"`).FindStringSubmatch(out)
	if m == nil {
		l.t.Fatalf("no rule %q in:\n%s", name, out)
	}
	var n int
	fmt.Sscan(m[1], &n)
	return n
}

// inHost runs f in the host namespace (the runtime execs plugins from the
// calling thread, so they run there too).
func (l *lab) inHost(f func() error) error { return netns.Do(l.hostPath, f) }

// conflist is bridge (onto the lab's bridge) with dhcp as IPAM.
func (l *lab) conflist(version string) *spec.ConfList {
	l.t.Helper()
	s := fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[{"type":"bridge","bridge":%q,
		"ipam":{"type":"dhcp","daemonSocketPath":%q}}]}`, version, labNet, l.bridge, l.sock)
	list, err := spec.ParseConfList([]byte(s))
	if err != nil {
		l.t.Fatal(err)
	}
	return list
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
