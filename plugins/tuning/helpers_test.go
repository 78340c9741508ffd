package tuning

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// fixture is a container namespace holding a veth pair: eth0 (the
// attachment's interface) and peer0 (another interface), plus a dataDir.
type fixture struct {
	ns, path, dataDir string
	mac               string // eth0's original MAC
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	name, path := testutil.NewNS(t, "tun")
	f := &fixture{ns: name, path: path, dataDir: t.TempDir()}
	f.ip(t, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
	f.ip(t, "link", "set", "eth0", "up")
	f.mac = f.link(t, "eth0").Address
	return f
}

func (f *fixture) ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", f.ns}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

type linkInfo struct {
	Address string   `json:"address"`
	MTU     int      `json:"mtu"`
	TxQLen  int      `json:"txqlen"`
	Flags   []string `json:"flags"`
}

func (l linkInfo) promisc() bool  { return slices.Contains(l.Flags, "PROMISC") }
func (l linkInfo) allmulti() bool { return slices.Contains(l.Flags, "ALLMULTI") }

func (f *fixture) link(t *testing.T, name string) linkInfo {
	t.Helper()
	out, err := exec.Command("ip", "-n", f.ns, "-j", "link", "show", name).Output()
	if err != nil {
		t.Fatalf("ip link show %s: %v", name, err)
	}
	var ls []linkInfo
	if err := json.Unmarshal(out, &ls); err != nil || len(ls) != 1 {
		t.Fatalf("ip -j link show %s: %v: %s", name, err, out)
	}
	return ls[0]
}

func (f *fixture) sysctl(t *testing.T, rel string) string {
	t.Helper()
	out, err := testutil.InNS(t, f.ns, "cat", "/proc/sys/"+rel)
	if err != nil {
		t.Fatalf("read %s: %v: %s", rel, err, out)
	}
	return out
}

// prevResult is a bridge-like result, as in the spec's tuning example.
func (f *fixture) prevResult(version string) string {
	if spec.Compare(version, spec.V030) < 0 {
		return `{"cniVersion":"` + version + `","ip4":{"ip":"10.1.0.5/16","gateway":"10.1.0.1"},"dns":{"nameservers":["10.1.0.1"]}}`
	}
	return `{"cniVersion":"` + version + `",
		"interfaces":[{"name":"cni0","mac":"00:11:22:33:44:55"},{"name":"veth3243","mac":"55:44:33:22:11:11"},
			{"name":"eth0","mac":"` + f.mac + `","sandbox":"` + f.path + `"}],
		"ips":[{"address":"10.1.0.5/16","gateway":"10.1.0.1","interface":2}],
		"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.1.0.1"]}}`
}

// conf builds a tuning config: keys is the plugin-specific JSON body
// (without braces), prev is added as prevResult when non-empty.
func (f *fixture) conf(version, keys, prev string) string {
	return testutil.ChainedConf(testutil.Head(version, "tunenet", "tuning")+`,"dataDir":"`+f.dataDir+`"`, keys, prev)
}

// run invokes our plugin in-process.
func (f *fixture) run(t *testing.T, cmd, conf string, extra ...string) (string, int) {
	t.Helper()
	return testutil.RunPlugin(t, Plugin(), "", testutil.EnvWith(f.env(cmd), extra...), conf)
}

// runRef runs the reference tuning binary with the same inputs.
func (f *fixture) runRef(t *testing.T, cmd, conf string) (string, int) {
	t.Helper()
	return testutil.RunRefPlugin(t, "tuning", "", f.env(cmd), conf)
}

func (f *fixture) env(cmd string) map[string]string {
	return map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": "ctr1", "CNI_NETNS": f.path, "CNI_IFNAME": "eth0"}
}

func (f *fixture) mustAdd(t *testing.T, conf string, extra ...string) map[string]any {
	t.Helper()
	out, code := f.run(t, "ADD", conf, extra...)
	if code != 0 {
		t.Fatalf("ADD failed: %s", out)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("ADD output: %v: %s", err, out)
	}
	return m
}

func (f *fixture) mustSucceed(t *testing.T, cmd, conf string, extra ...string) {
	t.Helper()
	if out, code := f.run(t, cmd, conf, extra...); code != 0 {
		t.Fatalf("%s failed: %s", cmd, out)
	}
}

// expectError runs cmd and wants a CNI error with code and every mention.
func (f *fixture) expectError(t *testing.T, cmd, conf string, code uint, mentions ...string) {
	t.Helper()
	out, rc := f.run(t, cmd, conf)
	if rc == 0 {
		t.Fatalf("%s succeeded, want error code %d: %s", cmd, code, out)
	}
	e, ok := spec.ParseError([]byte(out))
	if !ok {
		t.Fatalf("%s: not an error result: %s", cmd, out)
	}
	if e.Code != code {
		t.Errorf("%s: code %d, want %d: %s", cmd, e.Code, code, e.Msg)
	}
	for _, m := range mentions {
		if !strings.Contains(e.Error(), m) {
			t.Errorf("%s: message %q does not mention %q", cmd, e.Error(), m)
		}
	}
}

func (f *fixture) savedFile() string { return filepath.Join(f.dataDir, "ctr1_eth0.json") }

func (f *fixture) hasSaved() bool {
	_, err := os.Stat(f.savedFile())
	return err == nil
}

// ifaceMACs returns result interface name -> mac.
func ifaceMACs(t *testing.T, res map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	ifs, _ := res["interfaces"].([]any)
	for _, i := range ifs {
		m := i.(map[string]any)
		out[m["name"].(string)], _ = m["mac"].(string)
	}
	return out
}

func jsonEqual(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("not JSON: %v: %s", err, want)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("mismatch\n got: %s\nwant: %s", got, want)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
