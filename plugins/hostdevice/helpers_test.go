package hostdevice

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// lab is a test "host" namespace holding the device, a veth pair: dev0 is
// the device the plugin moves, peer0 stays in the host as the other end
// of its wire (addressed, so traffic through the moved device can be
// checked). host-local from the reference plugins is the IPAM.
type lab struct {
	t                *testing.T
	host, hostPath   string
	dataDir, ipamDir string
	origMAC          string
	cniPath          string // where IPAM is found: the reference's by default
}

func newLab(t *testing.T) *lab {
	t.Helper()
	host, hostPath := testutil.NewNS(t, "hdh")
	l := &lab{t: t, host: host, hostPath: hostPath, dataDir: t.TempDir(), ipamDir: t.TempDir(), cniPath: testutil.RefBin(t)}
	l.ip("link", "add", "dev0", "mtu", "1400", "type", "veth", "peer", "name", "peer0")
	l.ip("link", "set", "dev0", "alias", "uplink-a")
	l.ip("link", "set", "dev0", "up")
	l.ip("link", "set", "peer0", "up")
	l.ip("addr", "add", "10.60.0.1/24", "dev", "peer0")
	l.ip("addr", "add", "fd00:60::1/64", "dev", "peer0", "nodad")
	l.origMAC = l.link(host, "dev0").Address
	return l
}

func (l *lab) ip(args ...string) { l.t.Helper(); ipIn(l.t, l.host, args...) }

func ipIn(t *testing.T, ns string, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s %v: %v: %s", ns, args, err, out)
	}
}

type linkInfo struct {
	Name    string   `json:"ifname"`
	Address string   `json:"address"`
	MTU     int      `json:"mtu"`
	Alias   string   `json:"ifalias"`
	Flags   []string `json:"flags"`
}

func (li linkInfo) up() bool {
	for _, f := range li.Flags {
		if f == "UP" {
			return true
		}
	}
	return false
}

// link returns the named link of ns; Name is "" when there is none.
func (l *lab) link(ns, name string) linkInfo {
	l.t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-j", "link", "show", name).Output()
	if err != nil {
		return linkInfo{}
	}
	var ls []linkInfo
	if err := json.Unmarshal(out, &ls); err != nil || len(ls) != 1 {
		l.t.Fatalf("ip -j link show %s: %v: %s", name, err, out)
	}
	return ls[0]
}

// conf builds a host-device config: base keys, extra keys, and host-local
// with these subnets (none: no ipam).
func (l *lab) conf(version string, extra map[string]any, subnets ...string) string {
	l.t.Helper()
	c := map[string]any{"cniVersion": version, "name": "hdnet", "type": "host-device", "device": "dev0", "dataDir": l.dataDir}
	if len(subnets) > 0 {
		c["ipam"] = testutil.HostLocal(l.ipamDir, subnets, "192.168.0.0/16")
	}
	return testutil.Conf(l.t, c, extra)
}

// run executes one verb of the plugin inside the host netns.
func (l *lab) run(cmd, conf, id, nsPath, ifname string) (string, int) {
	l.t.Helper()
	env := map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": id, "CNI_NETNS": nsPath, "CNI_IFNAME": ifname, "CNI_PATH": l.cniPath}
	return testutil.RunPlugin(l.t, Plugin(), l.hostPath, env, conf)
}

func (l *lab) mustAdd(conf, id, nsPath, ifname string) (*spec.Result, string) {
	l.t.Helper()
	out, code := l.run("ADD", conf, id, nsPath, ifname)
	if code != 0 {
		l.t.Fatalf("ADD %s failed (%d): %s", id, code, out)
	}
	r, err := spec.ParseResult([]byte(out), "")
	if err != nil {
		l.t.Fatalf("decode ADD result: %v: %s", err, out)
	}
	return r, strings.TrimSpace(out)
}

func (l *lab) mustRun(cmd, conf, id, nsPath, ifname string) {
	l.t.Helper()
	if out, code := l.run(cmd, conf, id, nsPath, ifname); code != 0 {
		l.t.Fatalf("%s %s failed (%d): %s", cmd, id, code, out)
	}
}

// restored checks dev0 is back in the host as it was: name, MAC, MTU,
// alias, up; and that no record is left.
func (l *lab) restored(wantUp bool) {
	l.t.Helper()
	d := l.link(l.host, "dev0")
	switch {
	case d.Name == "":
		l.t.Fatalf("dev0 is not back in the host namespace")
	case d.Address != l.origMAC || d.MTU != 1400 || d.Alias != "uplink-a" || d.up() != wantUp:
		l.t.Errorf("dev0 not restored: %+v (want MAC %s, MTU 1400, alias uplink-a, up %v)", d, l.origMAC, wantUp)
	}
	if files, _ := listStates(l.dataDir, "hdnet"); len(files) != 0 {
		l.t.Errorf("records left: %v", files)
	}
}

// runBin runs a plugin executable (the reference's) in the host namespace.
func (l *lab) runBin(bin, cmd, conf, id, nsPath, ifname string) (string, error) {
	l.t.Helper()
	c := exec.Command("ip", "netns", "exec", l.host, bin)
	c.Env = []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + nsPath, "CNI_IFNAME=" + ifname,
		"CNI_PATH=" + testutil.RefBin(l.t), "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	c.Stdin = strings.NewReader(conf)
	out, err := c.CombinedOutput()
	return string(out), err
}

func withPrev(t *testing.T, conf, prev string) string { return testutil.WithPrevResult(t, conf, prev) }

func in(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := testutil.InNS(t, ns, args...)
	if err != nil {
		t.Fatalf("%v in %s: %v: %s", args, ns, err, out)
	}
	return out
}

func cniError(t *testing.T, out string) *spec.Error { return testutil.CNIError(t, out) }
