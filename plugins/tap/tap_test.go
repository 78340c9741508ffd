package tap

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/spec"
)

// attachQueue opens a queue of the container's tap, as a VM would; the
// tap has carrier while it is open.
func (l *lab) attachQueue(name string, multi bool) int {
	l.t.Helper()
	var fd int
	err := netns.Do(l.contPath, func() error {
		var err error
		if fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0); err != nil {
			return err
		}
		ifr, _ := unix.NewIfreq(name)
		f := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if multi {
			f |= unix.IFF_MULTI_QUEUE
		}
		ifr.SetUint16(f)
		return unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	})
	if err != nil {
		l.t.Fatalf("attach a queue to %s: %v", name, err)
	}
	l.t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// readARP waits for an ARP request for target on a queue and returns the
// sender MAC and IP it carries.
func readARP(t *testing.T, fds []int, target netip.Addr) (net.HardwareAddr, netip.Addr) {
	t.Helper()
	buf := make([]byte, 2048)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		pfds := make([]unix.PollFd, len(fds))
		for i, fd := range fds {
			pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		}
		if _, err := unix.Poll(pfds, 200); err != nil && err != unix.EINTR {
			t.Fatalf("poll: %v", err)
		}
		for i, p := range pfds {
			if p.Revents&unix.POLLIN == 0 {
				continue
			}
			n, err := unix.Read(fds[i], buf)
			if err != nil {
				continue
			}
			f := buf[:n]
			// Ethernet (14) + ARP for IPv4 over Ethernet (28).
			if n < 42 || binary.BigEndian.Uint16(f[12:14]) != unix.ETH_P_ARP || binary.BigEndian.Uint16(f[20:22]) != 1 {
				continue
			}
			if tpa, _ := netip.AddrFromSlice(f[38:42]); tpa == target {
				spa, _ := netip.AddrFromSlice(f[28:32])
				return net.HardwareAddr(bytes.Clone(f[22:28])), spa
			}
		}
	}
	t.Fatalf("no ARP request for %s on the tap's queues within 5 s", target)
	return nil, netip.Addr{}
}

// ADD makes an addressed tap (dual-stack, configured MAC, MTU, owner,
// group, multi-queue); a VM-side queue sees the kernel's ARP for a
// neighbour; CHECK passes and catches changes; DEL removes it, twice.
func TestAddCheckDel(t *testing.T) {
	l := newLab(t)
	conf := l.conf("1.1.0", map[string]any{"mtu": 1400, "mac": "02:00:00:aa:bb:01", "owner": 1000, "group": 1001, "multiQueue": true},
		"10.61.0.0/24", "fd00:61::/64")
	r, out := l.mustAdd(conf, "t1", "tap0")
	if len(r.Interfaces) != 1 || r.Interfaces[0].Name != "tap0" || r.Interfaces[0].Mac != "02:00:00:aa:bb:01" ||
		r.Interfaces[0].Sandbox != l.contPath || len(r.IPs) != 2 || len(r.Routes) != 1 {
		t.Fatalf("result: %s", out)
	}
	ti := l.link("tap0")
	d := ti.LinkInfo.Data
	if ti.LinkInfo.Kind != "tun" || d.Type != "tap" || !d.Persist || !d.MultiQueue ||
		ti.MTU != 1400 || !ti.up() || ti.Address != "02:00:00:aa:bb:01" {
		t.Errorf("tap0: %+v", ti)
	}
	if uid, gid := l.owner("tap0"); uid != 1000 || gid != 1001 {
		t.Errorf("tap0 owner %d group %d, want 1000 1001", uid, gid)
	}
	// Both flags as the reference's netlink path leaves them (owner and
	// group set): vnet_hdr on; multi-queue turns packet info off.
	if !d.VnetHdr || d.PI {
		t.Errorf("tap0 flags: vnet_hdr %v pi %v, want on/off", d.VnetHdr, d.PI)
	}
	if got, _ := exec.Command("ip", "netns", "exec", l.cont, "cat", "/proc/sys/net/ipv4/conf/tap0/arp_notify").Output(); strings.TrimSpace(string(got)) != "1" {
		t.Errorf("arp_notify = %q", got)
	}
	q := []int{l.attachQueue("tap0", true), l.attachQueue("tap0", true)}
	go exec.Command("ip", "netns", "exec", l.cont, "ping", "-c", "3", "-W", "1", "10.61.0.99").Run()
	mac, src := readARP(t, q, netip.MustParseAddr("10.61.0.99"))
	if mac.String() != "02:00:00:aa:bb:01" || src != r.IPs[0].Address.Addr() {
		t.Errorf("ARP from %s %s, want 02:00:00:aa:bb:01 %s", mac, src, r.IPs[0].Address.Addr())
	}

	check := withPrev(t, conf, out)
	l.mustRun("CHECK", check, "t1", "tap0")
	for _, c := range []struct {
		extra map[string]any
		want  string
	}{
		{map[string]any{"owner": 0}, "uid"},
		{map[string]any{"group": 0}, "group"},
		{map[string]any{"multiQueue": false}, "multi-queue"},
		{map[string]any{"mtu": 1500}, "MTU"},
		{map[string]any{"bridge": "br0"}, "bridge"},
	} {
		bad := l.conf("1.1.0", map[string]any{"mtu": 1400, "mac": "02:00:00:aa:bb:01", "owner": 1000, "group": 1001, "multiQueue": true},
			"10.61.0.0/24", "fd00:61::/64")
		bad = withPrev(t, patch(t, bad, c.extra), out)
		if o, code := l.run("CHECK", bad, "t1", "tap0"); code == 0 || !strings.Contains(o, c.want) {
			t.Errorf("CHECK with %v: %d %s", c.extra, code, o)
		}
	}
	l.ip("addr", "del", r.IPs[1].Address.String(), "dev", "tap0")
	if o, code := l.run("CHECK", check, "t1", "tap0"); code == 0 || !strings.Contains(o, r.IPs[1].Address.Addr().String()) {
		t.Errorf("CHECK with an address gone: %d %s", code, o)
	}

	l.mustRun("DEL", conf, "t1", "tap0")
	if l.link("tap0").Name != "" {
		t.Errorf("tap0 left after DEL")
	}
	if a := l.allocations(); len(a) != 0 {
		t.Errorf("allocations left: %v", a)
	}
	l.mustRun("DEL", conf, "t1", "tap0")
}

// patch overwrites keys of a JSON object.
func patch(t *testing.T, conf string, extra map[string]any) string {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal([]byte(conf), &c); err != nil {
		t.Fatal(err)
	}
	for k, v := range extra {
		c[k] = v
	}
	b, _ := json.Marshal(c)
	return string(b)
}

// Defaults (no owner or group, single queue): as `ip tuntap add mode tap`
// makes it (packet info off, no vnet_hdr, no owner); the kernel's MAC;
// layer 2 only (no ipam): up, no address.
func TestDefaults(t *testing.T) {
	l := newLab(t)
	conf := l.conf("1.0.0", nil)
	r, out := l.mustAdd(conf, "d1", "tap1")
	ti := l.link("tap1")
	d := ti.LinkInfo.Data
	if d.Type != "tap" || d.PI || d.VnetHdr || d.MultiQueue || !ti.up() || ti.MTU != 1500 {
		t.Errorf("tap1: %+v", ti)
	}
	if uid, gid := l.owner("tap1"); uid != -1 || gid != -1 {
		t.Errorf("tap1 owner %d group %d, want none", uid, gid)
	}
	if len(r.IPs) != 0 || r.Interfaces[0].Mac != ti.Address {
		t.Errorf("result: %s", out)
	}
	l.mustRun("CHECK", withPrev(t, conf, out), "d1", "tap1")
	l.mustRun("DEL", conf, "d1", "tap1")
}

// The MAC comes from "mac", CNI_ARGS MAC and runtimeConfig "mac", each
// overriding the one before, as in the reference.
func TestMACPrecedence(t *testing.T) {
	l := newLab(t)
	for i, c := range []struct {
		extra map[string]any
		args  string
		want  string
	}{
		{map[string]any{"mac": "02:00:00:00:01:01"}, "", "02:00:00:00:01:01"},
		{map[string]any{"mac": "02:00:00:00:01:01"}, "IgnoreUnknown=1;MAC=02:00:00:00:01:02;K8S_POD_NAME=x", "02:00:00:00:01:02"},
		{map[string]any{"mac": "02:00:00:00:01:01", "runtimeConfig": map[string]any{"mac": "02:00:00:00:01:03"}}, "MAC=02:00:00:00:01:02", "02:00:00:00:01:03"},
	} {
		l.args = c.args
		r, _ := l.mustAdd(l.conf("1.1.0", c.extra), "m", "tap0")
		if got := l.link("tap0").Address; got != c.want || r.Interfaces[0].Mac != c.want {
			t.Errorf("case %d: MAC %s (result %s), want %s", i, got, r.Interfaces[0].Mac, c.want)
		}
		l.mustRun("DEL", l.conf("1.1.0", c.extra), "m", "tap0")
	}
}

// A tap on a bridge of the container's namespace.
func TestBridge(t *testing.T) {
	l := newLab(t)
	l.ip("link", "add", "br0", "type", "bridge")
	conf := l.conf("1.1.0", map[string]any{"bridge": "br0"})
	_, out := l.mustAdd(conf, "b1", "tap0")
	if m := l.link("tap0").Master; m != "br0" {
		t.Fatalf("tap0 master %q, want br0", m)
	}
	l.mustRun("CHECK", withPrev(t, conf, out), "b1", "tap0")
	l.ip("link", "set", "tap0", "nomaster")
	if o, code := l.run("CHECK", withPrev(t, conf, out), "b1", "tap0"); code == 0 || !strings.Contains(o, "br0") {
		t.Errorf("CHECK off the bridge: %d %s", code, o)
	}
	l.mustRun("DEL", conf, "b1", "tap0")
}

// Every spec version.
func TestVersions(t *testing.T) {
	l := newLab(t)
	for _, v := range spec.AllVersions {
		t.Run(v, func(t *testing.T) {
			l.t = t
			conf := l.conf(v, nil, "10.61.0.0/24")
			_, out := l.mustAdd(conf, "v", "tap0")
			if spec.Compare(v, spec.V030) < 0 {
				if !strings.Contains(out, `"ip4"`) {
					t.Errorf("%s result without ip4: %s", v, out)
				}
			} else if !strings.Contains(out, `"interfaces"`) {
				t.Errorf("%s result without interfaces: %s", v, out)
			}
			if spec.VerbSupported(v, spec.CmdCheck) {
				l.mustRun("CHECK", withPrev(t, conf, out), "v", "tap0")
			}
			if spec.VerbSupported(v, spec.CmdStatus) {
				l.mustRun("STATUS", conf, "", "")
			}
			if spec.VerbSupported(v, spec.CmdGC) {
				l.mustRun("GC", conf, "", "")
			}
			l.mustRun("DEL", conf, "v", "tap0")
			if l.link("tap0").Name != "" {
				t.Errorf("tap0 left")
			}
		})
	}
}

// Bad input is refused with code 7 (4 for CNI_ARGS) naming the key and
// value, before anything is created.
func TestBadInput(t *testing.T) {
	l := newLab(t)
	for _, c := range []struct {
		extra map[string]any
		args  string
		want  string
		code  uint // 0: 7
	}{
		{map[string]any{"mtu": -1}, "", "mtu", 0},
		{map[string]any{"mtu": 70000}, "", "70000", 0},
		{map[string]any{"owner": -1}, "", "owner", 0},
		{map[string]any{"group": 4294967295}, "", "group", 0},
		{map[string]any{"mac": "zz:zz"}, "", "zz:zz", 0},
		{map[string]any{"mac": "01:00:5e:00:00:01"}, "", "multicast", 0},
		{map[string]any{"mac": "02:00:00:00:00:00:00:01"}, "", "not an Ethernet MAC", 0},
		{map[string]any{"mac": "00:00:00:00:00:00"}, "", "all-zero", 0},
		{nil, "MAC=nope", "CNI_ARGS MAC", spec.ErrInvalidEnvironment},
		{map[string]any{"runtimeConfig": map[string]any{"mac": "1:2"}}, "", "runtimeConfig.mac", 0},
		{map[string]any{"bridge": "a/b"}, "", "a/b", 0},
		{map[string]any{"bridge": "nosuchbr"}, "", "nosuchbr", 0},
		{map[string]any{"selinuxContext": "system_u:system_r:container_t:s0"}, "", "selinuxContext", 0},
	} {
		l.args = c.args
		out, code := l.run("ADD", l.conf("1.1.0", c.extra, "10.61.0.0/24"), "bad", "tap0")
		e := cniError(t, out)
		if c.code == 0 {
			c.code = spec.ErrInvalidNetworkConfig
		}
		if code == 0 || e.Code != c.code || !strings.Contains(e.Msg, c.want) {
			t.Errorf("%v %q: code %d %q, want code %d naming %q", c.extra, c.args, e.Code, e.Msg, c.code, c.want)
		}
		if l.link("tap0").Name != "" || len(l.allocations()) != 0 {
			t.Fatalf("%v: refused ADD left a tap or an allocation", c.extra)
		}
	}
	l.args = ""
	// A taken CNI_IFNAME: refused, and the runtime's DEL after it leaves
	// the container's own interface alone.
	l.ip("link", "add", "tap0", "type", "veth", "peer", "name", "x0")
	if out, code := l.run("ADD", l.conf("1.1.0", nil, "10.61.0.0/24"), "bad", "tap0"); code == 0 || !strings.Contains(out, "tap0") {
		t.Errorf("ADD with tap0 taken: %d %s", code, out)
	}
	l.mustRun("DEL", l.conf("1.1.0", nil, "10.61.0.0/24"), "bad", "tap0")
	if l.link("tap0").Name == "" {
		t.Errorf("DEL removed the container's own veth called tap0")
	}
}

// A failure after the tap exists removes it (and the allocation): an MTU
// the tun driver refuses (its maximum is 65521), an IPAM plugin missing.
func TestRollback(t *testing.T) {
	l := newLab(t)
	for _, conf := range []string{
		l.conf("1.1.0", map[string]any{"mtu": 65535}, "10.61.0.0/24"),
		l.conf("1.1.0", map[string]any{"ipam": map[string]any{"type": "no-such-ipam"}}),
		l.conf("1.1.0", map[string]any{"ipam": map[string]any{"type": "host-local", "dataDir": l.ipamDir, "subnet": "10.61.0.0/24",
			"routes": []map[string]string{{"dst": "192.168.0.0/16", "gw": "10.99.0.1"}}}}),
	} {
		if out, code := l.run("ADD", conf, "rb", "tap0"); code == 0 {
			t.Fatalf("ADD succeeded: %s", out)
		}
		if l.link("tap0").Name != "" || len(l.allocations()) != 0 {
			t.Errorf("failed ADD left a tap or an allocation (%s)", conf)
		}
	}
}

// With selinuxContext the tap is made by a helper process started with the
// label as its exec context. This machine has no SELinux, so the label is
// not written (writeExecLabel is replaced); the helper path itself runs:
// the test binary is started as the helper, in the container namespace.
func TestSelinuxHelper(t *testing.T) {
	l := newLab(t)
	var labels []string
	oldEnabled, oldWrite := selinuxEnabled, writeExecLabel
	selinuxEnabled = func() bool { return true }
	writeExecLabel = func(s string) error { labels = append(labels, s); return nil }
	defer func() { selinuxEnabled, writeExecLabel = oldEnabled, oldWrite }()
	conf := l.conf("1.1.0", map[string]any{"selinuxContext": "system_u:system_r:container_t:s0", "owner": 0, "group": 0})
	_, out := l.mustAdd(conf, "s1", "tap0")
	if len(labels) != 1 || labels[0] != "system_u:system_r:container_t:s0" {
		t.Errorf("exec labels written: %q", labels)
	}
	ti := l.link("tap0")
	if ti.LinkInfo.Data.Type != "tap" || ti.LinkInfo.Data.VnetHdr || !ti.up() {
		t.Errorf("tap0 made by the helper: %+v", ti)
	}
	if uid, gid := l.owner("tap0"); uid != 0 || gid != 0 {
		t.Errorf("tap0 owner %d group %d, want 0 0", uid, gid)
	}
	l.mustRun("CHECK", withPrev(t, conf, out), "s1", "tap0")
	l.mustRun("DEL", conf, "s1", "tap0")
}
