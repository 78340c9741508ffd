package firewall

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/launch"
	"github.com/patchbay-cni/patchbay/spec"
)

// A real firewalld (Debian's 1.3, nftables backend, unpacked by
// scripts/firewalld-deps.sh rather than installed as a service) for the
// tests: its own
// D-Bus daemon with a private system-bus configuration and socket in a temp
// dir, and firewalld itself inside the test's host netns, so that it only
// ever programs that namespace (in a mount namespace of its own where a
// tmpfs covers /run, and with its configuration in the temp dir). Both are
// started and stopped by PID. The plugins find it through
// DBUS_SYSTEM_BUS_ADDRESS.
type firewalldProc struct {
	dir, addr string
	bus, fwd  *launch.Process // started through internal/launch: they die with the test binary
}

const busConf = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="root"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// firewalldConf is Debian's default with cleanup on exit off (the netns
// goes with the test) and no kernel module handling.
const firewalldConf = `DefaultZone=public
CleanupOnExit=no
CleanupModulesOnExit=no
Lockdown=no
IPv6_rpfilter=yes
IndividualCalls=no
LogDenied=off
FirewallBackend=nftables
FlushAllOnReload=yes
RFC3964_IPv4=yes
`

func startFirewalld(t *testing.T, n *node) *firewalldProc {
	t.Helper()
	fwdDir := os.Getenv("PATCHBAY_FIREWALLD_DIR")
	if fwdDir == "" {
		home, _ := os.UserHomeDir()
		fwdDir = filepath.Join(home, ".cache", "patchbay", "firewalld")
	}
	script := filepath.Join(fwdDir, "usr", "sbin", "firewalld")
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("firewalld not unpacked (%v): run scripts/firewalld-deps.sh as root (make test-deps does)", err)
	}
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Fatalf("dbus-daemon not found (%v): run scripts/firewalld-deps.sh as root", err)
	}
	// Short: a unix socket path has room for 107 bytes.
	dir, err := os.MkdirTemp("", "pbfwd-")
	if err != nil {
		t.Fatal(err)
	}
	f := &firewalldProc{dir: dir, addr: "unix:path=" + filepath.Join(dir, "bus.sock")}
	machine := machinePathsState()
	t.Cleanup(func() {
		f.stopFirewalld(t)
		if f.bus != nil {
			if err := f.bus.Stop("dbus-daemon", 5*time.Second, nil); err != nil {
				t.Error(err)
			}
		}
		os.RemoveAll(dir)
		if after := machinePathsState(); after != machine {
			t.Errorf("firewalld changed the machine's paths:\nbefore:\n%s\nafter:\n%s", machine, after)
		}
	})
	writeFile(t, filepath.Join(dir, "bus.conf"), fmt.Sprintf(busConf, filepath.Join(dir, "bus.sock")))
	writeFile(t, filepath.Join(dir, "etc", "firewalld.conf"), firewalldConf)
	t0 := time.Now()
	bus := exec.Command("ip", "netns", "exec", n.name, "dbus-daemon", "--config-file="+filepath.Join(dir, "bus.conf"), "--nofork", "--nopidfile")
	bus.Stderr = &prefixWriter{t: t, p: "dbus-daemon: "}
	if f.bus, err = launch.Start(bus); err != nil {
		t.Fatalf("start dbus-daemon: %v", err)
	}
	if !waitUntil(5*time.Second, func() bool { _, err := os.Stat(filepath.Join(dir, "bus.sock")); return err == nil }) {
		t.Fatal("dbus-daemon did not create its socket in 5s")
	}
	// Debian's python (its packages are firewalld's libraries): another
	// python3 may come first in PATH. Its configuration and log are in the
	// temp dir; its run-time state (/run/firewalld) lands on a tmpfs over
	// /run in the mount namespace ip netns exec gives it.
	fwd := exec.Command("ip", "netns", "exec", n.name, "sh", "-c",
		`mount -t tmpfs tmpfs /run && exec /usr/bin/python3 "$1" --nofork --nopid --default-config "$2" --system-config "$3" --log-target file --log-file "$4"`,
		"sh", script, filepath.Join(fwdDir, "usr", "lib", "firewalld"), filepath.Join(dir, "etc"), filepath.Join(dir, "firewalld.log"))
	fwd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+f.addr, "PYTHONPATH="+filepath.Join(fwdDir, "usr", "lib", "python3", "dist-packages"))
	out := &prefixWriter{t: t, p: "firewalld: "}
	fwd.Stdout, fwd.Stderr = out, out
	if f.fwd, err = launch.Start(fwd); err != nil {
		t.Fatalf("start firewalld: %v", err)
	}
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", f.addr)
	ready := waitUntil(60*time.Second, func() bool {
		fd, err := connectFirewalld(context.Background())
		if err != nil {
			return false
		}
		defer fd.Close()
		var z string
		return fd.conn.Object(fwdName, fwdPath).Call(fwdName+".getDefaultZone", 0).Store(&z) == nil
	})
	if !ready {
		log, _ := os.ReadFile(filepath.Join(dir, "firewalld.log"))
		t.Fatalf("firewalld not ready on its bus within 60s; log:\n%s", log)
	}
	t.Logf("dbus-daemon and firewalld ready in %v", time.Since(t0).Round(time.Millisecond))
	return f
}

// stopFirewalld ends firewalld (and leaves its bus running).
func (f *firewalldProc) stopFirewalld(t *testing.T) {
	if f.fwd != nil {
		if err := f.fwd.Stop("firewalld", 10*time.Second, nil); err != nil {
			t.Error(err)
		}
	}
}

// machinePaths are where a firewalld keeps its configuration, state and
// log on a machine: the test's firewalld must change none of them.
var machinePaths = []string{"/etc/firewalld", "/var/lib/firewalld", "/var/log/firewalld", "/run/firewalld", "/etc/sysconfig"}

// machinePathsState lists what machinePaths hold (names, sizes and
// modification times, or their absence).
func machinePathsState() string {
	var b strings.Builder
	for _, root := range machinePaths {
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s %v %d %s\n", p, info.Mode(), info.Size(), info.ModTime().Format(time.RFC3339Nano))
			return nil
		})
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", root, err)
		}
	}
	return b.String()
}

func waitUntil(d time.Duration, f func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if f() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

type prefixWriter struct {
	t *testing.T
	p string
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		w.t.Log(w.p + l)
	}
	return len(b), nil
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// withoutFirewalld is a rule set without firewalld's own table: firewalld
// sets a zone's chains up on its first use and keeps them.
func withoutFirewalld(st string) string {
	i := strings.Index(st, "table inet firewalld {")
	if i < 0 {
		return st
	}
	j := strings.Index(st[i:], "\n}\n")
	if j < 0 {
		return st[:i]
	}
	return st[:i] + st[i+j+3:]
}

// inZone asks firewalld whether src is a source of zone.
func inZone(t *testing.T, zone, src string) bool {
	t.Helper()
	f, err := connectFirewalld(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ok, err := f.querySource(context.Background(), zone, src)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestFirewalld runs the firewalld backend against a real firewalld:
//   - explicit backend and a custom zone: ADD makes both addresses sources
//     of the zone (the reference's "IP/32", "IP/128"), which lets the
//     container's traffic through firewalld's forward filter to a peer
//     outside; CHECK passes, and fails once a source is removed behind its
//     back; DEL removes them (and the peer is unreachable again).
//   - no backend key: firewalld is found on the bus and used; with
//     same-bridge, the isolation rules go to iptables (as the reference).
//   - the reference's ADD (firewalld backend) is removed by our DEL.
//   - GC removes the sources of attachments not in the valid list.
//   - STATUS passes while firewalld runs and is code 50 once it stops, and
//     DEL then still succeeds.
func TestFirewalld(t *testing.T) {
	n := newNode(t)
	uplink(t, n)
	fwd := startFirewalld(t, n)
	// firewalld flushed the iptables tables when it started: touch the
	// built-in chains again (see newNode).
	for _, tool := range []string{"iptables", "ip6tables"} {
		n.sh(tool, "-A", "FORWARD", "-j", "RETURN")
		n.sh(tool, "-D", "FORWARD", "-j", "RETURN")
	}
	before := withoutFirewalld(n.state())

	l := n.list(bridgeFirewall("1.1.0", "fwfd", "fwbrfd", "10.43.0.0/24", "fd43::/64", `,"backend":"firewalld"`))
	// Without the plugin, firewalld's forward filter rejects the traffic.
	bare := n.list(`{"cniVersion":"1.1.0","name":"fwfd","plugins":[{"type":"bridge","bridge":"fwbrfd","isGateway":true,
	  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam0","ranges":[[{"subnet":"10.43.0.0/24","rangeStart":"10.43.0.200"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}`)
	n.mustAdd(bare, "f0", nil)
	if n.ping("f0", "192.0.2.2") {
		t.Error("control: without the plugin the container reaches the peer through firewalld")
	}
	n.mustDel(bare, "f0")

	res := n.mustAdd(l, "f1", nil)
	src4, src6 := addrOf(t, res, false)+"/32", addrOf(t, res, true)+"/128"
	if !inZone(t, "trusted", src4) || !inZone(t, "trusted", src6) {
		t.Errorf("%s, %s are not sources of zone trusted", src4, src6)
	}
	if !n.ping("f1", "192.0.2.2") {
		t.Error("the container does not reach the peer through firewalld")
	}
	if err := n.check(l, "f1"); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	f, err := connectFirewalld(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.removeSource(context.Background(), "trusted", src6); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := n.check(l, "f1"); err == nil {
		t.Error("CHECK passes with a source missing")
	}
	n.mustDel(l, "f1")
	if inZone(t, "trusted", src4) {
		t.Errorf("%s still a source after DEL", src4)
	}
	if n.ping("f1", "192.0.2.2") {
		t.Error("the container still reaches the peer after DEL")
	}

	// firewalldZone.
	lz := n.list(bridgeFirewall("1.1.0", "fwfdz", "fwbrfdz", "10.47.0.0/24", "", `,"backend":"firewalld","firewalldZone":"internal"`))
	srcz := addrOf(t, n.mustAdd(lz, "fz", nil), false) + "/32"
	if !inZone(t, "internal", srcz) || inZone(t, "trusted", srcz) {
		t.Errorf("firewalldZone internal: %s in internal=%v, trusted=%v", srcz, inZone(t, "internal", srcz), inZone(t, "trusted", srcz))
	}
	if err := n.check(lz, "fz"); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	n.mustDel(lz, "fz")
	if inZone(t, "internal", srcz) {
		t.Errorf("%s still a source of internal after DEL", srcz)
	}

	// Detected backend, with same-bridge isolation in iptables.
	ld := n.list(bridgeFirewall("1.1.0", "fwfd2", "fwbrfd2", "10.44.0.0/24", "", `,"ingressPolicy":"same-bridge"`))
	res = n.mustAdd(ld, "f2", nil)
	if src := addrOf(t, res, false) + "/32"; !inZone(t, "trusted", src) {
		t.Errorf("backend left out: %s is not a source of trusted", src)
	}
	if !n.iptablesHas(false, "-i fwbrfd2 ! -o fwbrfd2", "-j CNI-ISOLATION-STAGE-2") {
		t.Errorf("no iptables isolation rules:\n%s", n.state())
	}
	if n.iptablesHas(false, "CNI-FORWARD") {
		t.Error("firewalld backend wrote iptables address rules")
	}
	if err := n.check(ld, "f2"); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	n.mustDel(ld, "f2")
	if after := withoutFirewalld(n.state()); after != before {
		t.Errorf("left:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// The reference's ADD, our DEL.
	ours := n.cni.Path
	n.cni.Path = []string{refFirewallDir(t)}
	lr := n.list(bridgeFirewall("1.0.0", "fwfd3", "fwbrfd3", "10.45.0.0/24", "", `,"backend":"firewalld"`))
	res = n.mustAdd(lr, "f3", nil)
	src := addrOf(t, res, false) + "/32"
	if !inZone(t, "trusted", src) {
		t.Errorf("the reference did not add %s", src)
	}
	n.cni.Path = ours
	if err := n.check(lr, "f3"); err != nil {
		t.Errorf("our CHECK of the reference's sources: %v", err)
	}
	n.mustDel(lr, "f3")
	if inZone(t, "trusted", src) {
		t.Errorf("our DEL left the reference's source %s", src)
	}

	// GC.
	lg := n.list(bridgeFirewall("1.1.0", "fwfd4", "fwbrfd4", "10.46.0.0/24", "", `,"backend":"firewalld"`))
	keep, gone := addrOf(t, n.mustAdd(lg, "f4", nil), false)+"/32", addrOf(t, n.mustAdd(lg, "f5", nil), false)+"/32"
	if err := os.Remove(filepath.Join(n.dir, "cache", "results", "fwfd4-f5-eth0")); err != nil {
		t.Fatal(err)
	}
	if err := n.gc(lg, "f4"); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if !inZone(t, "trusted", keep) || inZone(t, "trusted", gone) {
		t.Errorf("after GC: %s in trusted=%v (want true), %s=%v (want false)", keep, inZone(t, "trusted", keep), gone, inZone(t, "trusted", gone))
	}

	// STATUS, and DEL without firewalld.
	status := func() error {
		return n.in(func(ctx context.Context) error { return n.cni.StatusNetworkList(ctx, lg) })
	}
	if err := status(); err != nil {
		t.Errorf("STATUS with firewalld running: %v", err)
	}
	fwd.stopFirewalld(t)
	if err := status(); spec.AsError(err, 0).Code != spec.ErrPluginNotAvailable {
		t.Errorf("STATUS without firewalld: %v (want code 50)", err)
	}
	n.mustDel(lg, "f4")
	if recs, _ := filepath.Glob(filepath.Join(n.dir, "fw", "*", "*")); len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
}
