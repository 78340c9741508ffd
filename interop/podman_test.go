package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

const (
	pmNet     = "pbpodman"
	pmBridge  = "pbpm0"
	pmSubnet  = "10.231.7.0/24"
	pmGateway = "10.231.7.1"
	// The test host netns's own address, on an uplink veth to a client netns.
	pmHostAddr   = "192.168.231.1"
	pmClientAddr = "192.168.231.2"
	pmHostPort   = "18080"
	pmBody       = "patchbay-podman-ok\n"
)

// podmanInspect is the part of `podman inspect` this test reads.
type podmanInspect struct {
	ID    string `json:"Id"`
	State struct {
		Pid       int
		ConmonPid int
		Running   bool
	}
	NetworkSettings struct {
		SandboxKey string
		Networks   map[string]struct {
			IPAddress   string
			IPPrefixLen int
			Gateway     string
		}
	}
	// Start times (from /proc) of State.Pid and State.ConmonPid when
	// inspected, so those PIDs are only ever acted on while they name the
	// same processes.
	pidStart, conmonStart string
}

// TestPodmanRunsContainerOnOurPlugins: Debian's podman 4.3 (CNI backend)
// runs a busybox-static --rootfs container on our bridge + host-local +
// portmap. The container gets an address in our subnet, reaches the gateway
// (ICMP and TCP), and -p HOST:CONTAINER forwards both for traffic from the
// host netns itself (nat OUTPUT) and from a peer on its uplink (nat
// PREROUTING). After `podman rm -f`, our IPAM has released the address and
// no veth, netns, NAT rule, cache entry or podman process is left.
func TestPodmanRunsContainerOnOurPlugins(t *testing.T) {
	requirePodman(t)
	pluginDir := testutil.OurBin(t)
	for _, typ := range []string{"bridge", "host-local", "portmap"} {
		if _, err := os.Stat(filepath.Join(pluginDir, typ)); err != nil {
			t.Fatalf("our plugin %s is missing from %s (%v): run `make build`", typ, pluginDir, err)
		}
	}
	hostNS, hostPath := testutil.NewNS(t, "pmhost")
	clientNS, clientPath := testutil.NewNS(t, "pmcli")
	uplink(t, hostNS, clientNS)

	e := newPodmanEnv(t, hostPath, pluginDir)
	// libcni (inside podman) caches results in /var/lib/cni, which podman
	// 4.3 cannot move: in a private mount namespace it is a temp dir.
	m := newPodmanMounts(t)
	e.mountNS, e.varLib = m.ns, m.varLib
	dataDir := t.TempDir()
	writeFile(t, filepath.Join(e.netDir, "50-"+pmNet+".conflist"), fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true,
     "ipam": {"type": "host-local", "dataDir": %q,
              "ranges": [[{"subnet": %q, "gateway": %q}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`, pmNet, pmBridge, dataDir, pmSubnet, pmGateway))
	rootfs := busyboxRootfs(t, pmBody)

	if v, err := e.podman(20*time.Second, "version", "--format", "{{.Client.Version}}"); err == nil {
		t.Logf("podman %s", v)
	}
	if out := e.mustPodman(t, 20*time.Second, "network", "ls", "--format", "{{.Name}}"); !strings.Contains(out, pmNet) {
		t.Fatalf("podman does not list our network %s from %s:\n%s", pmNet, e.netDir, out)
	}

	const name = "pbpm-web"
	var ctr podmanInspect
	// Registered before the container exists: removes it and anything it
	// left, even when an assertion below fails.
	t.Cleanup(func() { podmanTeardown(t, e, name, &ctr) })

	start := time.Now()
	e.mustPodman(t, 60*time.Second, "run", "-d", "--name", name, "--network", pmNet,
		"-p", pmHostPort+":80", "--rootfs", rootfs, "/bin/busybox", "httpd", "-f", "-p", "80", "-h", "/www")
	tRun := time.Since(start)

	ctr = inspectContainer(t, e, name)
	ctr.pidStart, _ = procStart(ctr.State.Pid)
	ctr.conmonStart, _ = procStart(ctr.State.ConmonPid)
	nw, ok := ctr.NetworkSettings.Networks[pmNet]
	if !ok || !ctr.State.Running {
		t.Fatalf("container not running on %s: %+v", pmNet, ctr)
	}
	ip, err := netip.ParseAddr(nw.IPAddress)
	if err != nil || !netip.MustParsePrefix(pmSubnet).Contains(ip) || ip.String() == pmGateway {
		t.Fatalf("podman reports address %q, want one in %s other than the gateway", nw.IPAddress, pmSubnet)
	}
	if nw.Gateway != pmGateway || nw.IPPrefixLen != 24 {
		t.Errorf("podman reports gateway %q /%d, want %s /24", nw.Gateway, nw.IPPrefixLen, pmGateway)
	}
	t.Logf("container %.12s: pid %d, conmon %d, %s/%d, netns %s", ctr.ID, ctr.State.Pid, ctr.State.ConmonPid, ip, nw.IPPrefixLen, ctr.NetworkSettings.SandboxKey)

	// host-local's on-disk record, in the reference layout.
	ipFile := filepath.Join(dataDir, pmNet, ip.String())
	if b, err := os.ReadFile(ipFile); err != nil {
		t.Errorf("host-local allocation file: %v", err)
	} else if got := string(b); got != ctr.ID+"\r\neth0" {
		t.Errorf("%s holds %q, want %q", ipFile, got, ctr.ID+"\r\neth0")
	}

	start = time.Now()
	addr := e.mustPodman(t, 20*time.Second, "exec", name, "/bin/ip", "-4", "-o", "addr", "show", "dev", "eth0")
	tExec := time.Since(start)
	if !strings.Contains(addr, " "+ip.String()+"/24 ") {
		t.Errorf("eth0 in the container lacks %s/24:\n%s", ip, addr)
	}
	if out := e.mustPodman(t, 20*time.Second, "exec", name, "/bin/ip", "-4", "route", "show", "default"); !strings.Contains(out, "via "+pmGateway+" dev eth0") {
		t.Errorf("container default route is not via %s on eth0: %q", pmGateway, out)
	}
	if out, err := e.podman(20*time.Second, "exec", name, "/bin/ping", "-c1", "-W2", pmGateway); err != nil {
		t.Errorf("container cannot ping gateway %s: %v\n%s", pmGateway, err, out)
	}
	checkTCPToGateway(t, e, name, hostPath)

	// -p 18080:80 through our portmap: from the host netns to its own
	// address (locally generated: nat OUTPUT), then from the uplink peer
	// (forwarded: nat PREROUTING).
	hostURL := "http://" + net.JoinHostPort(pmHostAddr, pmHostPort) + "/"
	start = time.Now()
	httpGetIn(t, hostPath, hostURL, "host netns")
	tFirstHTTP := time.Since(start)
	httpGetIn(t, clientPath, hostURL, "uplink peer netns")

	start = time.Now()
	e.mustPodman(t, 60*time.Second, "rm", "-f", "-t", "0", name)
	tRm := time.Since(start)
	checkNothingLeft(t, e, hostNS, ctr, ipFile)
	t.Logf("timings: podman run -d %v, podman exec %v, first HTTP via portmap %v, podman rm -f %v",
		tRun.Round(time.Millisecond), tExec.Round(time.Millisecond), tFirstHTTP.Round(time.Millisecond), tRm.Round(time.Millisecond))
}

// uplink links the host netns to a client netns with a veth pair, giving the
// host netns its own address (the one -p publishes on) and the client a peer.
func uplink(t *testing.T, hostNS, clientNS string) {
	t.Helper()
	steps := [][]string{
		{"ip", "-n", hostNS, "link", "add", "up0", "type", "veth", "peer", "name", "up1", "netns", clientNS},
		{"ip", "-n", hostNS, "addr", "add", pmHostAddr + "/24", "dev", "up0"},
		{"ip", "-n", hostNS, "link", "set", "up0", "up"},
		{"ip", "-n", clientNS, "addr", "add", pmClientAddr + "/24", "dev", "up1"},
		{"ip", "-n", clientNS, "link", "set", "up1", "up"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
}

func inspectContainer(t *testing.T, e *podmanEnv, name string) podmanInspect {
	t.Helper()
	out := e.mustPodman(t, 20*time.Second, "inspect", name)
	var all []podmanInspect
	if err := json.Unmarshal([]byte(out), &all); err != nil || len(all) != 1 {
		t.Fatalf("podman inspect %s: %v\n%s", name, err, out)
	}
	return all[0]
}

// checkTCPToGateway: busybox nc in the container connects to a listener the
// test holds on the gateway address in the host netns and sends a token.
func checkTCPToGateway(t *testing.T, e *podmanEnv, name, hostPath string) {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(hostPath, func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(pmGateway, "0"))
		return err
	}); err != nil {
		t.Fatalf("listen on the gateway: %v", err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			line += " (" + err.Error() + ")"
		}
		got <- strings.TrimSpace(line) + "|" + c.RemoteAddr().(*net.TCPAddr).IP.String()
	}()
	out, err := e.podman(20*time.Second, "exec", name, "/bin/sh", "-c", fmt.Sprintf("echo tcp-to-gateway | nc -w 3 %s %d", pmGateway, port))
	if err != nil {
		t.Errorf("container nc to gateway %s:%d: %v\n%s", pmGateway, port, err, out)
		return
	}
	select {
	case s := <-got:
		want := "tcp-to-gateway|" + ctrIPFromInspect(t, e, name)
		if s != want {
			t.Errorf("gateway listener got %q, want %q", s, want)
		}
	case <-time.After(10 * time.Second):
		t.Error("gateway listener received nothing in 10s")
	}
}

func ctrIPFromInspect(t *testing.T, e *podmanEnv, name string) string {
	return inspectContainer(t, e, name).NetworkSettings.Networks[pmNet].IPAddress
}

// httpGetIn fetches url with sockets created in the netns at nsPath,
// retrying up to 10s while httpd starts, and checks the body.
func httpGetIn(t *testing.T, nsPath, url, from string) {
	t.Helper()
	client := &http.Client{
		Timeout: 3 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
				nerr := netns.Do(nsPath, func() error {
					c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
					return err
				})
				return c, nerr
			},
		},
	}
	var lastErr error
	ok := waitFor(10*time.Second, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			lastErr = err
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || string(b) != pmBody {
			lastErr = fmt.Errorf("status %d body %q err %v", resp.StatusCode, b, err)
			return false
		}
		return true
	})
	if !ok {
		t.Errorf("GET %s from the %s (published port via our portmap): %v", url, from, lastErr)
	}
}

// checkNothingLeft runs after `podman rm -f`: every trace of the container
// on the host side must be gone, within bounded waits.
func checkNothingLeft(t *testing.T, e *podmanEnv, hostNS string, ctr podmanInspect, ipFile string) {
	t.Helper()
	if _, err := os.Stat(ipFile); !os.IsNotExist(err) {
		t.Errorf("host-local did not release %s (stat: %v)", ipFile, err)
	}
	if out, err := testutil.InNS(t, hostNS, "ip", "-o", "link", "show", "type", "veth"); err != nil {
		t.Errorf("ip link show type veth: %v: %s", err, out)
	} else {
		for _, l := range strings.Split(out, "\n") {
			if l != "" && !strings.Contains(l, " up0@") {
				t.Errorf("veth left in the test host netns: %s", l)
			}
		}
	}
	if out, err := testutil.InNS(t, hostNS, "nft", "list", "ruleset"); err != nil {
		t.Errorf("nft list ruleset: %v: %s", err, out)
	} else if strings.Contains(out, pmHostPort) || strings.Contains(out, ctr.NetworkSettings.Networks[pmNet].IPAddress) {
		t.Errorf("port-mapping rules left in the test host netns:\n%s", out)
	}
	if k := ctr.NetworkSettings.SandboxKey; k != "" {
		if _, err := os.Stat(k); !os.IsNotExist(err) {
			t.Errorf("container netns %s still exists after podman rm (stat: %v)", k, err)
		}
	}
	// libcni's cache (podman's /var/lib/cni: e.varLib). The DEL must have
	// removed our entry.
	cache := filepath.Join(e.varLib, "results", pmNet+"-"+ctr.ID+"-eth0")
	if _, err := os.Stat(cache); !os.IsNotExist(err) {
		t.Errorf("libcni cache entry %s left (stat: %v)", cache, err)
	}
	for _, p := range []struct {
		what  string
		pid   int
		start string
	}{{"container process", ctr.State.Pid, ctr.pidStart}, {"conmon", ctr.State.ConmonPid, ctr.conmonStart}} {
		if p.pid <= 0 || p.start == "" {
			t.Errorf("podman reported no %s pid (%d) to check", p.what, p.pid)
			continue
		}
		if !waitFor(10*time.Second, func() bool { return !procRunning(p.pid, p.start) }) {
			t.Errorf("%s (pid %d) still running 10s after podman rm -f", p.what, p.pid)
		}
	}
	if !waitFor(5*time.Second, func() bool { return len(pidsMentioning(ctr.ID)) == 0 }) {
		t.Errorf("processes naming container %.12s still running after podman rm -f: %v", ctr.ID, pidsMentioning(ctr.ID))
	}
}

// podmanTeardown removes the container (idempotent) and, as a last resort,
// kills only processes attributable to it: the PIDs podman reported for it
// (while they still name the same processes) and any process whose command
// line carries its 64-hex ID.
func podmanTeardown(t *testing.T, e *podmanEnv, name string, ctr *podmanInspect) {
	if out, err := e.podman(60*time.Second, "rm", "-f", "--ignore", "-t", "0", name); err != nil {
		t.Errorf("cleanup: podman rm -f %s: %v\n%s", name, err, out)
	}
	if ctr.ID == "" {
		return
	}
	for _, p := range []struct {
		pid   int
		start string
	}{{ctr.State.Pid, ctr.pidStart}, {ctr.State.ConmonPid, ctr.conmonStart}} {
		pid, st := p.pid, p.start
		if pid > 0 && st != "" && procRunning(pid, st) {
			if !waitFor(5*time.Second, func() bool { return !procRunning(pid, st) }) {
				t.Errorf("cleanup: killing pid %d of container %.12s left by podman", pid, ctr.ID)
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	for _, pid := range pidsMentioning(ctr.ID) {
		t.Errorf("cleanup: killing pid %d naming container %.12s", pid, ctr.ID)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// A netns bind mount podman failed to remove.
	if k := ctr.NetworkSettings.SandboxKey; strings.HasPrefix(k, "/run/netns/netns-") && netns.Exists(k) {
		t.Errorf("cleanup: removing container netns %s left by podman", k)
		exec.Command("umount", k).Run()
		os.Remove(k)
	}
}
