package tap

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// lab is a test "host" namespace the plugin runs in and a container
// namespace the tap goes into; host-local from the reference plugins is
// the IPAM.
type lab struct {
	t              *testing.T
	hostPath       string
	cont, contPath string
	ipamDir        string
	args           string // CNI_ARGS
}

func newLab(t *testing.T) *lab {
	t.Helper()
	_, hostPath := testutil.NewNS(t, "tph")
	cont, contPath := testutil.NewNS(t, "tpc")
	return &lab{t: t, hostPath: hostPath, cont: cont, contPath: contPath, ipamDir: t.TempDir()}
}

// conf builds a tap config: base keys, extra keys (nil deletes), and
// host-local with these subnets (none: no ipam).
func (l *lab) conf(version string, extra map[string]any, subnets ...string) string {
	l.t.Helper()
	c := map[string]any{"cniVersion": version, "name": "tapnet", "type": "tap"}
	if len(subnets) > 0 {
		c["ipam"] = testutil.HostLocal(l.ipamDir, subnets, "192.168.0.0/16")
	}
	return testutil.Conf(l.t, c, extra)
}

// run executes one verb of the plugin inside the host netns.
func (l *lab) run(cmd, conf, id, ifname string) (string, int) {
	l.t.Helper()
	env := map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": id, "CNI_NETNS": l.contPath, "CNI_IFNAME": ifname,
		"CNI_PATH": testutil.RefBin(l.t), "CNI_ARGS": l.args}
	return testutil.RunPlugin(l.t, Plugin(), l.hostPath, env, conf)
}

func (l *lab) mustAdd(conf, id, ifname string) (*spec.Result, string) {
	l.t.Helper()
	out, code := l.run("ADD", conf, id, ifname)
	if code != 0 {
		l.t.Fatalf("ADD %s failed (%d): %s", id, code, out)
	}
	r, err := spec.ParseResult([]byte(out), "")
	if err != nil {
		l.t.Fatalf("decode ADD result: %v: %s", err, out)
	}
	return r, strings.TrimSpace(out)
}

func (l *lab) mustRun(cmd, conf, id, ifname string) {
	l.t.Helper()
	if out, code := l.run(cmd, conf, id, ifname); code != 0 {
		l.t.Fatalf("%s %s failed (%d): %s", cmd, id, code, out)
	}
}

func (l *lab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", l.cont}, args...)...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// tapInfo is what `ip -d -j link` says of a tun/tap device.
type tapInfo struct {
	Name     string   `json:"ifname"`
	Address  string   `json:"address"`
	MTU      int      `json:"mtu"`
	Flags    []string `json:"flags"`
	Master   string   `json:"master"`
	LinkInfo struct {
		Kind string `json:"info_kind"`
		Data struct {
			Type       string `json:"type"`
			PI         bool   `json:"pi"`
			VnetHdr    bool   `json:"vnet_hdr"`
			MultiQueue bool   `json:"multi_queue"`
			Persist    bool   `json:"persist"`
			// user and group are names when /etc/passwd or /etc/group
			// has them, else numbers: see owner.
			User  any `json:"user"`
			Group any `json:"group"`
		} `json:"info_data"`
	} `json:"linkinfo"`
}

func (ti tapInfo) up() bool {
	for _, f := range ti.Flags {
		if f == "UP" {
			return true
		}
	}
	return false
}

// link returns the named link in the container; Name is "" when none.
func (l *lab) link(name string) tapInfo {
	l.t.Helper()
	out, err := exec.Command("ip", "-n", l.cont, "-d", "-j", "link", "show", name).Output()
	if err != nil {
		return tapInfo{}
	}
	var ls []tapInfo
	if err := json.Unmarshal(out, &ls); err != nil || len(ls) != 1 {
		l.t.Fatalf("ip -j link show %s: %v: %s", name, err, out)
	}
	return ls[0]
}

// owner returns the tap's owner and group as the kernel reports them
// (-1: none).
func (l *lab) owner(name string) (uid, gid int64) {
	l.t.Helper()
	n, err := link.Open(l.contPath)
	if err != nil {
		l.t.Fatal(err)
	}
	defer n.Close()
	lk, err := n.H.LinkByName(name)
	if err != nil {
		l.t.Fatal(err)
	}
	t, ok := lk.(*netlink.Tuntap)
	if !ok {
		l.t.Fatalf("%s is a %s", name, lk.Type())
	}
	uid, gid = -1, -1
	if hasTunAttr(l, name, "user") {
		uid = int64(t.Owner)
	}
	if hasTunAttr(l, name, "group") {
		gid = int64(t.Group)
	}
	return uid, gid
}

// hasTunAttr tells whether `ip -d -j link` lists the tun attribute key.
func hasTunAttr(l *lab, name, key string) bool {
	out, _ := exec.Command("ip", "-n", l.cont, "-d", "-j", "link", "show", name).Output()
	_, data, _ := strings.Cut(string(out), `"info_data"`)
	return strings.Contains(data, `"`+key+`":`)
}

func (l *lab) allocations() []string {
	out, _ := exec.Command("sh", "-c", "ls "+l.ipamDir+"/tapnet 2>/dev/null | grep -v -e lock -e last_reserved || true").Output()
	return strings.Fields(string(out))
}

func withPrev(t *testing.T, conf, prev string) string { return testutil.WithPrevResult(t, conf, prev) }

func cniError(t *testing.T, out string) *spec.Error { return testutil.CNIError(t, out) }
