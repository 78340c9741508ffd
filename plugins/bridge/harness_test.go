package bridge

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// harness is one test "host" namespace where the plugin runs (so the bridge
// is created there, never in the machine's namespace), with host-local
// from the reference plugins as IPAM and its dataDir in a temp dir.
type harness struct {
	t        *testing.T
	host     string // host netns name
	hostPath string
	dataDir  string
	cniPath  string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	host, hostPath := testutil.NewNS(t, "brh")
	return &harness{t: t, host: host, hostPath: hostPath, dataDir: t.TempDir(), cniPath: testutil.RefBin(t)}
}

// container makes a container netns.
func (h *harness) container() (string, string) {
	h.t.Helper()
	return testutil.NewNS(h.t, "brc")
}

// looseNS makes a netns the test may delete itself (cleanup tolerates that).
func looseNS(t *testing.T) (string, string) {
	t.Helper()
	testutil.RequireRoot(t)
	b := make([]byte, 4)
	rand.Read(b)
	name := "pbt-brl-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return name, "/run/netns/" + name
}

// conf builds a bridge config: base keys, then extra keys, then ipam
// (nil: no ipam key; otherwise host-local with these subnets).
func (h *harness) conf(version string, extra map[string]any, subnets ...string) string {
	h.t.Helper()
	c := map[string]any{"cniVersion": version, "name": "testnet", "type": "bridge", "bridge": "pbbr0"}
	if len(subnets) > 0 {
		c["ipam"] = testutil.HostLocal(h.dataDir, subnets)
	}
	return testutil.Conf(h.t, c, extra)
}

// withPrev adds prevResult to a config.
func withPrev(t *testing.T, conf, prev string) string {
	t.Helper()
	var c map[string]json.RawMessage
	if err := json.Unmarshal([]byte(conf), &c); err != nil {
		t.Fatal(err)
	}
	c["prevResult"] = json.RawMessage(prev)
	b, _ := json.Marshal(c)
	return string(b)
}

// run executes one verb of plugin p inside the host netns and returns
// stdout and the exit code.
func (h *harness) runPlugin(p skel.Plugin, cmd, conf, id, nsPath, ifname string) (string, int) {
	h.t.Helper()
	env := map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": id, "CNI_NETNS": nsPath, "CNI_IFNAME": ifname, "CNI_PATH": h.cniPath}
	return testutil.RunPlugin(h.t, p, h.hostPath, env, conf)
}

func (h *harness) run(cmd, conf, id, nsPath, ifname string) (string, int) {
	h.t.Helper()
	return h.runPlugin(Plugin(), cmd, conf, id, nsPath, ifname)
}

// mustAdd runs ADD and decodes the result.
func (h *harness) mustAdd(conf, id, nsPath, ifname string) (*spec.Result, string) {
	h.t.Helper()
	out, code := h.run("ADD", conf, id, nsPath, ifname)
	if code != 0 {
		h.t.Fatalf("ADD %s failed (%d): %s", id, code, out)
	}
	r, err := spec.ParseResult([]byte(out), "")
	if err != nil {
		h.t.Fatalf("decode ADD result: %v: %s", err, out)
	}
	return r, strings.TrimSpace(out)
}

func (h *harness) mustDel(conf, id, nsPath, ifname string) {
	h.t.Helper()
	if out, code := h.run("DEL", conf, id, nsPath, ifname); code != 0 {
		h.t.Fatalf("DEL %s failed (%d): %s", id, code, out)
	}
}

// in runs a command in a netns, failing the test on error.
func in(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := testutil.InNS(t, ns, args...)
	if err != nil {
		t.Fatalf("%s in %s: %v: %s", strings.Join(args, " "), ns, err, out)
	}
	return out
}

// allocated lists host-local's allocation files for testnet.
func (h *harness) allocated() []string {
	m, _ := filepath.Glob(filepath.Join(h.dataDir, "testnet", "*[0-9a-f]"))
	var out []string
	for _, f := range m {
		if b := filepath.Base(f); b != "lock" && !strings.HasPrefix(b, "last_reserved") {
			out = append(out, b)
		}
	}
	return out
}

// cniError decodes an error result.
func cniError(t *testing.T, out string) *spec.Error {
	t.Helper()
	e, ok := spec.ParseError([]byte(out))
	if !ok {
		t.Fatalf("not a CNI error: %s", out)
	}
	return e
}
