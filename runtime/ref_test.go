package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// refEnv is a test "host" netns with the reference plugins v1.9.1 and
// private data and cache dirs; bridges live in the host netns, so removing
// it (testutil cleanup) removes them.
type refEnv struct {
	host, hostPath    string
	bridge            string
	dataDir, cacheDir string
	cni               *CNI
	subnetOctet       int
}

func newRefEnv(t *testing.T, octet int) *refEnv {
	testutil.RequireRoot(t)
	b := make([]byte, 4)
	rand.Read(b)
	e := &refEnv{bridge: "pbr" + hex.EncodeToString(b), subnetOctet: octet}
	e.host, e.hostPath = testutil.NewNS(t, "rth")
	d := t.TempDir()
	e.dataDir, e.cacheDir = filepath.Join(d, "ipam"), filepath.Join(d, "cache")
	e.cni = &CNI{Path: []string{testutil.RefBin(t)}, CacheDir: e.cacheDir}
	return e
}

// conflist is bridge + host-local (+ tuning with the mac capability).
func (e *refEnv) conflist(version string, tuning bool) string {
	s := fmt.Sprintf(`{"cniVersion":%q,"name":"refnet","plugins":[
	  {"type":"bridge","bridge":%q,"isGateway":true,
	   "ipam":{"type":"host-local","dataDir":%q,"subnet":"10.250.%d.0/24","routes":[{"dst":"0.0.0.0/0"}]}}`,
		version, e.bridge, e.dataDir, e.subnetOctet)
	if tuning {
		s += fmt.Sprintf(`,{"type":"tuning","dataDir":%q,"capabilities":{"mac":true},"mtu":1400}`, filepath.Join(filepath.Dir(e.dataDir), "tuning"))
	}
	return s + "]}"
}

// in runs f inside the host netns, as a runtime on that host would.
func (e *refEnv) in(t *testing.T, f func() error) error {
	t.Helper()
	return netns.Do(e.hostPath, f)
}

func ipFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "refnet"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "10.") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestRefBridgeChain(t *testing.T) {
	e := newRefEnv(t, 1)
	ctr, ctrPath := testutil.NewNS(t, "rtc")
	l := mustList(t, e.conflist("1.1.0", true))
	rt := &RuntimeConf{ContainerID: "refctr1", NetNS: ctrPath, IfName: "eth0",
		CapabilityArgs: map[string]any{"mac": "0a:58:0a:fa:01:42", "portMappings": []any{}}}

	var res *spec.Result
	if err := e.in(t, func() (err error) {
		res, err = e.cni.AddNetworkList(ctx, l, rt)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if res.CNIVersion != "1.1.0" || len(res.IPs) != 1 || !strings.HasPrefix(res.IPs[0].Address.String(), "10.250.1.") {
		t.Fatalf("ADD result %s", res)
	}
	addr := res.IPs[0].Address.String()
	out, err := testutil.InNS(t, ctr, "ip", "-o", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(out, addr) {
		t.Errorf("container eth0: %v: %s (want %s)", err, out, addr)
	}
	// tuning applied the capability arg and its own mtu after bridge.
	out, _ = testutil.InNS(t, ctr, "ip", "-o", "link", "show", "dev", "eth0")
	if !strings.Contains(out, "0a:58:0a:fa:01:42") || !strings.Contains(out, "mtu 1400") {
		t.Errorf("container eth0 link: %s", out)
	}
	// The plugins ran in the host netns (they inherit the locked thread's
	// namespace): the bridge is there and not in the machine's namespace.
	if out, err := testutil.InNS(t, e.host, "ip", "link", "show", e.bridge); err != nil {
		t.Errorf("bridge not in host netns: %v: %s", err, out)
	}
	if err := exec.Command("ip", "link", "show", e.bridge).Run(); err == nil {
		t.Fatalf("bridge %s was created in the root namespace", e.bridge)
	}
	cacheFile := filepath.Join(e.cacheDir, "results", "refnet-refctr1-eth0")
	if _, err := os.Stat(cacheFile); err != nil {
		t.Errorf("no cache file after ADD: %v", err)
	}
	if got := ipFiles(t, e.dataDir); len(got) != 1 || got[0]+"/24" != addr {
		t.Errorf("host-local files %v, want the one for %s", got, addr)
	}

	for _, step := range []struct {
		name string
		f    func() error
	}{
		{"CHECK", func() error { return e.cni.CheckNetworkList(ctx, l, rt) }},
		{"STATUS", func() error { return e.cni.StatusNetworkList(ctx, l) }},
		{"DEL", func() error { return e.cni.DelNetworkList(ctx, l, rt) }},
		{"DEL again", func() error { return e.cni.DelNetworkList(ctx, l, rt) }},
	} {
		if err := e.in(t, step.f); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
	}
	if _, err := os.Stat(cacheFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cache file after DEL: %v", err)
	}
	if out, err := testutil.InNS(t, ctr, "ip", "link", "show", "eth0"); err == nil {
		t.Errorf("eth0 still in the container after DEL: %s", out)
	}
	if got := ipFiles(t, e.dataDir); len(got) != 0 {
		t.Errorf("host-local still holds %v after DEL", got)
	}
	// CHECK after DEL: the attachment is unknown.
	if err := e.in(t, func() error { return e.cni.CheckNetworkList(ctx, l, rt) }); code(err) != spec.ErrUnknownContainer {
		t.Errorf("CHECK after DEL: %v", err)
	}
}

func TestRefGCReleasesStale(t *testing.T) {
	e := newRefEnv(t, 2)
	ctrA, pathA := testutil.NewNS(t, "rtga")
	_, pathB := testutil.NewNS(t, "rtgb")
	l := mustList(t, e.conflist("1.1.0", false))
	rtA := &RuntimeConf{ContainerID: "gcA", NetNS: pathA, IfName: "eth0"}
	rtB := &RuntimeConf{ContainerID: "gcB", NetNS: pathB, IfName: "eth0"}
	if err := e.in(t, func() error {
		for _, rt := range []*RuntimeConf{rtA, rtB} {
			if _, err := e.cni.AddNetworkList(ctx, l, rt); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := len(ipFiles(t, e.dataDir)); n != 2 {
		t.Fatalf("%d host-local allocations, want 2", n)
	}
	// B stays valid; A is stale.
	valid := []spec.Attachment{{ContainerID: "gcB", IfName: "eth0"}}
	if err := e.in(t, func() error { return e.cni.GCNetworkList(ctx, l, valid) }); err != nil {
		t.Fatal(err)
	}
	if n := len(ipFiles(t, e.dataDir)); n != 1 {
		t.Errorf("%d host-local allocations after GC, want 1 (B's)", n)
	}
	if out, err := testutil.InNS(t, ctrA, "ip", "link", "show", "eth0"); err == nil {
		t.Errorf("A's eth0 survived GC: %s", out)
	}
	atts, err := e.cni.GetCachedAttachments("refnet", "")
	if err != nil || len(atts) != 1 || atts[0].ContainerID != "gcB" {
		t.Errorf("cache after GC: %v %v", atts, err)
	}
	// Empty valid list: B goes too.
	if err := e.in(t, func() error { return e.cni.GCNetworkList(ctx, l, nil) }); err != nil {
		t.Fatal(err)
	}
	if got := ipFiles(t, e.dataDir); len(got) != 0 {
		t.Errorf("host-local allocations after GC with no valid attachment: %v", got)
	}
	if atts, _ := e.cni.GetCachedAttachments("refnet", ""); len(atts) != 0 {
		t.Errorf("cache not empty: %v", atts)
	}
}

func TestRefOldVersionResult(t *testing.T) {
	e := newRefEnv(t, 3)
	ctr, ctrPath := testutil.NewNS(t, "rto")
	rt := &RuntimeConf{ContainerID: "old1", NetNS: ctrPath, IfName: "eth0"}
	for _, tc := range []struct{ name, conf string }{
		{"list", e.conflist("0.2.0", false)},
		{"single conf", fmt.Sprintf(`{"cniVersion":"0.2.0","name":"refnet","type":"bridge","bridge":%q,"isGateway":true,
			"ipam":{"type":"host-local","dataDir":%q,"subnet":"10.250.3.0/24"}}`, e.bridge, e.dataDir)},
	} {
		var l *spec.ConfList
		var err error
		if tc.name == "list" {
			l = mustList(t, tc.conf)
		} else if l, err = spec.ConfListFromConf([]byte(tc.conf)); err != nil {
			t.Fatal(err)
		}
		var res *spec.Result
		if err := e.in(t, func() (err error) {
			res, err = e.cni.AddNetworkList(ctx, l, rt)
			return err
		}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		out, err := res.Encode("")
		if err != nil || !strings.Contains(string(out), `"ip4":{"ip":"10.250.3.`) || !strings.Contains(string(out), `"cniVersion":"0.2.0"`) {
			t.Errorf("%s: result %s, want the 0.2.0 format", tc.name, out)
		}
		if got, _ := testutil.InNS(t, ctr, "ip", "-o", "-4", "addr", "show", "dev", "eth0"); !strings.Contains(got, "10.250.3.") {
			t.Errorf("%s: container eth0: %s", tc.name, got)
		}
		// CHECK does not exist before 0.4.0.
		if err := e.in(t, func() error { return e.cni.CheckNetworkList(ctx, l, rt) }); code(err) != spec.ErrIncompatibleVersion {
			t.Errorf("%s: CHECK on 0.2.0: %v", tc.name, err)
		}
		if err := e.in(t, func() error { return e.cni.DelNetworkList(ctx, l, rt) }); err != nil {
			t.Fatalf("%s: DEL: %v", tc.name, err)
		}
		if got := ipFiles(t, e.dataDir); len(got) != 0 {
			t.Errorf("%s: allocations left: %v", tc.name, got)
		}
	}
}
