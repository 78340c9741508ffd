package vrf

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
	"github.com/patchbay-cni/patchbay/spec"
)

// This machine's kernel has no vrf: every test here runs in the VM.
func TestMain(m *testing.M) { os.Exit(vmtest.Wrap(func() int { return testutil.Run(m) })) }

// lab is a host namespace the plugin runs in and a container namespace
// with veth interfaces into the host, addressed as an interface plugin
// would leave them (the prevResult describes them).
type lab struct {
	t              *testing.T
	host, hostPath string
	cont, contPath string
}

func newLab(t *testing.T) *lab {
	t.Helper()
	host, hostPath := testutil.NewNS(t, "vrh")
	cont, contPath := testutil.NewNS(t, "vrc")
	return &lab{t: t, host: host, hostPath: hostPath, cont: cont, contPath: contPath}
}

func ipIn(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip -n %s %v: %v: %s", ns, args, err, out)
	}
	return string(out)
}

// iface makes container interface name (veth to the host), with
// 10.62.<n>.2/24 and fd00:62:<n>::2/64, a route to 192.168.<n>.0/24 via
// the IPv4 gateway and one to fd00:99:<n>::/64 via the IPv6 gateway, and
// returns the prevResult an interface plugin would have given.
func (l *lab) iface(name string, n int) string {
	l.t.Helper()
	hostEnd := fmt.Sprintf("h%s", name)
	ipIn(l.t, l.host, "link", "add", hostEnd, "type", "veth", "peer", "name", name, "netns", l.cont)
	ipIn(l.t, l.host, "addr", "add", fmt.Sprintf("10.62.%d.1/24", n), "dev", hostEnd)
	ipIn(l.t, l.host, "addr", "add", fmt.Sprintf("fd00:62:%d::1/64", n), "dev", hostEnd, "nodad")
	ipIn(l.t, l.host, "link", "set", hostEnd, "up")
	ipIn(l.t, l.cont, "addr", "add", fmt.Sprintf("10.62.%d.2/24", n), "dev", name)
	ipIn(l.t, l.cont, "addr", "add", fmt.Sprintf("fd00:62:%d::2/64", n), "dev", name, "nodad")
	ipIn(l.t, l.cont, "link", "set", name, "up")
	ipIn(l.t, l.cont, "route", "add", fmt.Sprintf("192.168.%d.0/24", n), "via", fmt.Sprintf("10.62.%d.1", n))
	// An on-link route and one via a gateway only it makes reachable (as
	// ptp's are).
	ipIn(l.t, l.cont, "route", "add", fmt.Sprintf("10.99.%d.1/32", n), "dev", name, "scope", "link")
	ipIn(l.t, l.cont, "route", "add", fmt.Sprintf("10.98.%d.0/24", n), "via", fmt.Sprintf("10.99.%d.1", n))
	ipIn(l.t, l.cont, "route", "add", fmt.Sprintf("fd00:99:%d::/64", n), "via", fmt.Sprintf("fd00:62:%d::1", n))
	return fmt.Sprintf(`{"cniVersion":"1.1.0","interfaces":[{"name":%q,"sandbox":%q}],
	 "ips":[{"address":"10.62.%[3]d.2/24","gateway":"10.62.%[3]d.1","interface":0},{"address":"fd00:62:%[3]d::2/64","gateway":"fd00:62:%[3]d::1","interface":0}],
	 "routes":[{"dst":"192.168.%[3]d.0/24","gw":"10.62.%[3]d.1"},{"dst":"fd00:99:%[3]d::/64"}]}`, name, l.contPath, n)
}

func conf(version, vrfname string, table int, prev string) string {
	c := map[string]any{"cniVersion": version, "name": "vrfnet", "type": "vrf", "vrfname": vrfname}
	if table != 0 {
		c["table"] = table
	}
	if prev != "" {
		c["prevResult"] = json.RawMessage(prev)
	}
	b, _ := json.Marshal(c)
	return string(b)
}

func (l *lab) run(cmd, conf, id, ifname string) (string, int) {
	l.t.Helper()
	env := map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": id, "CNI_NETNS": l.contPath, "CNI_IFNAME": ifname, "CNI_PATH": "/nonexistent"}
	return testutil.RunPlugin(l.t, Plugin(), l.hostPath, env, conf)
}

func (l *lab) mustRun(cmd, conf, id, ifname string) string {
	l.t.Helper()
	out, code := l.run(cmd, conf, id, ifname)
	if code != 0 {
		l.t.Fatalf("%s %s %s failed (%d): %s", cmd, id, ifname, code, out)
	}
	return out
}

// master is the name of name's master in the container ("" for none).
func (l *lab) master(name string) string {
	l.t.Helper()
	var ls []struct {
		Master string `json:"master"`
	}
	if err := json.Unmarshal([]byte(ipIn(l.t, l.cont, "-j", "link", "show", name)), &ls); err != nil || len(ls) != 1 {
		l.t.Fatalf("link %s: %v", name, err)
	}
	return ls[0].Master
}

func (l *lab) hasLink(name string) bool {
	return exec.Command("ip", "-n", l.cont, "link", "show", name).Run() == nil
}

func (l *lab) ping(args ...string) error {
	out, err := testutil.InNS(l.t, l.cont, append([]string{"ping", "-c", "1", "-W", "5"}, args...)...)
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// Two interfaces into one VRF (table picked: 1): addresses kept (IPv6
// re-added), routes moved from the main table into the VRF's, traffic
// through the VRF; CHECK passes and catches changes; DEL of the first
// keeps the VRF, DEL of the last removes it; DEL repeats and DEL without a
// namespace succeed.
func TestTwoInterfacesOneVRF(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		l := newLab(t)
		prev0, prev1 := l.iface("eth0", 0), l.iface("eth1", 1)
		c0 := conf("1.1.0", "blue", 0, prev0)
		out := l.mustRun("ADD", c0, "c1", "eth0")
		res, err := spec.ParseResult([]byte(out), "")
		if err != nil {
			t.Fatal(err)
		}
		if l.master("eth0") != "blue" {
			t.Fatalf("eth0 not in vrf blue")
		}
		if got := ipIn(t, l.cont, "-d", "link", "show", "blue"); !strings.Contains(got, "vrf table 1 ") {
			t.Errorf("vrf blue: %s", got)
		}
		// The moved routes are said to be in table 1 (a 1.1.0 result).
		for _, r := range res.Routes {
			if r.Table == nil || *r.Table != 1 {
				t.Errorf("result route %s table %v, want 1", r.Dst, r.Table)
			}
		}
		addrs := ipIn(t, l.cont, "addr", "show", "dev", "eth0")
		if !strings.Contains(addrs, "10.62.0.2/24") || !strings.Contains(addrs, "fd00:62:0::2/64") && !strings.Contains(addrs, "fd00:62::2/64") {
			t.Errorf("eth0 lost addresses in the vrf:\n%s", addrs)
		}
		if main := ipIn(t, l.cont, "route", "show", "table", "main"); strings.Contains(main, "eth0") {
			t.Errorf("eth0 routes left in the main table:\n%s", main)
		}
		vrf4, vrf6 := ipIn(t, l.cont, "route", "show", "vrf", "blue"), ipIn(t, l.cont, "-6", "route", "show", "vrf", "blue")
		if !strings.Contains(vrf4, "192.168.0.0/24 via 10.62.0.1 dev eth0") || !strings.Contains(vrf6, "fd00:99::/64 via fd00:62::1 dev eth0") ||
			!strings.Contains(vrf4, "10.99.0.1 dev eth0 scope link") || !strings.Contains(vrf4, "10.98.0.0/24 via 10.99.0.1 dev eth0") {
			t.Errorf("routes in vrf blue:\n%s%s", vrf4, vrf6)
		}
		for _, dst := range []string{"10.62.0.1", "fd00:62::1"} {
			if err := l.ping("-I", "blue", dst); err != nil {
				t.Errorf("ping %s in vrf blue: %v", dst, err)
			}
		}

		c1 := conf("1.1.0", "blue", 1, prev1) // an explicit table equal to the VRF's
		l.mustRun("ADD", c1, "c1", "eth1")
		if l.master("eth1") != "blue" {
			t.Fatalf("eth1 not in vrf blue")
		}
		if err := l.ping("-I", "blue", "10.62.1.1"); err != nil {
			t.Errorf("ping over eth1 in vrf blue: %v", err)
		}
		check0 := conf("1.1.0", "blue", 0, strings.TrimSpace(out))
		l.mustRun("CHECK", check0, "c1", "eth0")
		l.mustRun("CHECK", conf("1.0.0", "blue", 0, strings.Replace(prev0, `"1.1.0"`, `"1.0.0"`, 1)), "c1", "eth0")
		// CHECK catches: a wrong table, a route gone, eth0 out of the VRF.
		if o, code := l.run("CHECK", conf("1.1.0", "blue", 7, strings.TrimSpace(out)), "c1", "eth0"); code == 0 || !strings.Contains(o, "table") {
			t.Errorf("CHECK with another table: %d %s", code, o)
		}
		ipIn(t, l.cont, "route", "del", "192.168.0.0/24", "vrf", "blue")
		if o, code := l.run("CHECK", check0, "c1", "eth0"); code == 0 || !strings.Contains(o, "192.168.0.0/24") {
			t.Errorf("CHECK with a route gone: %d %s", code, o)
		}
		ipIn(t, l.cont, "route", "add", "192.168.0.0/24", "via", "10.62.0.1", "vrf", "blue")
		l.mustRun("CHECK", check0, "c1", "eth0")

		l.mustRun("DEL", c0, "c1", "eth0")
		if l.master("eth0") != "" || !l.hasLink("blue") || l.master("eth1") != "blue" {
			t.Fatalf("after DEL of eth0: eth0 master %q, vrf kept %v, eth1 master %q", l.master("eth0"), l.hasLink("blue"), l.master("eth1"))
		}
		if o, code := l.run("CHECK", check0, "c1", "eth0"); code == 0 || !strings.Contains(o, "not in vrf") {
			t.Errorf("CHECK after eth0 left the vrf: %d %s", code, o)
		}
		l.mustRun("DEL", c0, "c1", "eth0") // again: eth0 is out already
		l.mustRun("DEL", c1, "c1", "eth1")
		if l.hasLink("blue") {
			t.Errorf("vrf blue left after its last interface's DEL")
		}
		l.mustRun("DEL", c1, "c1", "eth1")
		env := map[string]string{"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth1", "CNI_PATH": "/x"}
		if o, code := testutil.RunPlugin(t, Plugin(), l.hostPath, env, c1); code != 0 {
			t.Errorf("DEL without a netns: %s", o)
		}
	})
}

// An existing VRF with another table is refused (code 7), so is an
// interface already enslaved elsewhere; a VRF this ADD created is removed
// again when the ADD fails.
func TestConflictsAndRollback(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		l := newLab(t)
		prev := l.iface("eth0", 0)
		ipIn(t, l.cont, "link", "add", "red", "type", "vrf", "table", "10")
		ipIn(t, l.cont, "link", "set", "red", "up")
		out, code := l.run("ADD", conf("1.1.0", "red", 11, prev), "c1", "eth0")
		if e, _ := spec.ParseError([]byte(out)); code == 0 || e == nil || e.Code != 7 || !strings.Contains(e.Msg, "11") {
			t.Errorf("ADD into red (table 10) with table 11: %d %s", code, out)
		}
		// With no table the existing VRF's is taken.
		l.mustRun("ADD", conf("1.1.0", "red", 0, prev), "c1", "eth0")
		if l.master("eth0") != "red" {
			t.Fatalf("eth0 not in red")
		}
		// eth0 has a master now: another VRF's ADD fails and removes the
		// VRF it made.
		if out, code := l.run("ADD", conf("1.1.0", "green", 0, prev), "c2", "eth0"); code == 0 || !strings.Contains(out, "red") {
			t.Errorf("ADD of an enslaved interface: %d %s", code, out)
		}
		if l.hasLink("green") {
			t.Errorf("failed ADD left vrf green")
		}
		// A repeated ADD into the same VRF is fine.
		l.mustRun("ADD", conf("1.1.0", "red", 0, prev), "c1", "eth0")
		// The table auto-pick skips tables in use: red has 10, a new one
		// gets 1.
		l.iface("eth1", 1)
		l.mustRun("ADD", conf("1.1.0", "green", 0, l.iface("eth2", 2)), "c3", "eth2")
		if got := ipIn(t, l.cont, "-d", "link", "show", "green"); !strings.Contains(got, "vrf table 1 ") {
			t.Errorf("vrf green: %s", got)
		}
		l.mustRun("DEL", conf("1.1.0", "red", 0, ""), "c1", "eth0")
		l.mustRun("DEL", conf("1.1.0", "green", 0, ""), "c3", "eth2")
		if l.hasLink("red") || l.hasLink("green") {
			t.Errorf("vrfs left after DEL")
		}
	})
}

// Bad input: code 7 naming the key and value, before anything is made.
// Versions without chaining are refused (code 1), as by the reference.
func TestBadInputAndVersions(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		l := newLab(t)
		prev := l.iface("eth0", 0)
		for _, c := range []struct{ conf, want string }{
			{conf("1.1.0", "", 0, prev), "vrfname"},
			{conf("1.1.0", "a/b", 0, prev), "a/b"},
			{conf("1.1.0", "averyveryverylongname", 0, prev), "averyveryverylongname"},
			{conf("1.1.0", "blue", -1, prev), "table"},
			{conf("1.1.0", "blue", 254, prev), "254"},
			{conf("1.1.0", "blue", 1<<32, prev), "4294967296"},
			{conf("1.1.0", "blue", 0, ""), "prevResult"},
		} {
			out, code := l.run("ADD", c.conf, "b", "eth0")
			e, _ := spec.ParseError([]byte(out))
			if code == 0 || e == nil || e.Code != 7 || !strings.Contains(e.Msg, c.want) {
				t.Errorf("%s: %d %s (want code 7 naming %q)", c.conf, code, out, c.want)
			}
			if l.hasLink("blue") || l.master("eth0") != "" {
				t.Fatalf("refused ADD changed something")
			}
		}
		for _, v := range []string{"0.1.0", "0.2.0"} {
			if out, code := l.run("ADD", conf(v, "blue", 0, ""), "b", "eth0"); code == 0 || !strings.Contains(out, `"code": 1`) && !strings.Contains(out, `"code":1`) {
				t.Errorf("version %s: %d %s", v, code, out)
			}
		}
		for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
			p := strings.Replace(prev, `"1.1.0"`, `"`+v+`"`, 1)
			out := l.mustRun("ADD", conf(v, "blue", 0, p), "v", "eth0")
			if !strings.Contains(out, v) || l.master("eth0") != "blue" {
				t.Errorf("%s: %s", v, out)
			}
			if spec.VerbSupported(v, spec.CmdCheck) {
				l.mustRun("CHECK", conf(v, "blue", 0, p), "v", "eth0")
			}
			if spec.VerbSupported(v, spec.CmdStatus) {
				l.mustRun("STATUS", conf(v, "blue", 0, ""), "", "")
				l.mustRun("GC", conf(v, "blue", 0, ""), "", "")
			}
			l.mustRun("DEL", conf(v, "blue", 0, ""), "v", "eth0")
			if l.hasLink("blue") {
				t.Errorf("%s: vrf left", v)
			}
			// The IPv6 address and the routes went with the cycle in and
			// out of the VRF: put them back for the next version.
			ipIn(t, l.cont, "addr", "replace", "fd00:62::2/64", "dev", "eth0", "nodad")
			ipIn(t, l.cont, "route", "replace", "192.168.0.0/24", "via", "10.62.0.1")
			ipIn(t, l.cont, "route", "replace", "fd00:99::/64", "via", "fd00:62::1")
		}
	})
}
