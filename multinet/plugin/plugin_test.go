package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"cniVersion":"1.1.0","name":"m","type":"multinet","clusterNetwork":"k8s-pod-network","globalNamespaces":"a, b,,c"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.ConfDir != DefaultConfDir || c.CNIDir != DefaultCNIDir || c.MultusNamespace != "kube-system" || c.InterfacePrefix != "net" {
		t.Errorf("defaults not filled: %+v", c)
	}
	if !slices.Equal(c.GlobalNamespaces, []string{"a", "b", "c"}) {
		t.Errorf("globalNamespaces = %q", c.GlobalNamespaces)
	}
	// Multus's default global namespace.
	for _, conf := range []string{`{"clusterNetwork":"x"}`, `{"clusterNetwork":"x","globalNamespaces":""}`} {
		if c, err := ParseConfig([]byte(conf)); err != nil || !slices.Equal(c.GlobalNamespaces, []string{"default"}) {
			t.Errorf("%s: globalNamespaces = %q, %v; want [default]", conf, c.GlobalNamespaces, err)
		}
	}
	c, err = ParseConfig([]byte(`{"clusterNetwork":"x","globalNamespaces":["a","b"],"readinessTimeoutSeconds":2}`))
	if err != nil || !slices.Equal(c.GlobalNamespaces, []string{"a", "b"}) || c.readinessTimeout() != 2*time.Second {
		t.Errorf("list form: %v %+v", err, c)
	}
	for _, bad := range []string{`{}`, `{"clusterNetwork":"x","logLevel":"loud"}`, `{"clusterNetwork":"x","globalNamespaces":3}`,
		`{"clusterNetwork":"x","readinessTimeoutSeconds":-1}`, `not json`,
		`{"clusterNetwork":"x","readinessTimeoutSeconds":9223372037}`, `{"clusterNetwork":"x","apiTimeoutSeconds":9223372037}`} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%s) succeeded", bad)
		} else if ce := spec.AsError(err, 0); ce.Code == 0 {
			t.Errorf("ParseConfig(%s): error without a CNI code: %v", bad, err)
		}
	}
}

func TestPlanRoundTripAndCorruption(t *testing.T) {
	dir := t.TempDir()
	p := &Plan{ContainerID: "abc", NetNS: "/run/netns/x", Attachments: []*Attachment{{Name: "kube-system/c", IfName: "eth0", Default: true,
		Config: json.RawMessage(`{"cniVersion":"1.0.0","name":"c","plugins":[{"type":"bridge"}]}`)}}}
	if err := writePlan(dir, p); err != nil {
		t.Fatal(err)
	}
	got, err := readPlan(dir, "abc")
	if err != nil || got == nil || got.Attachments[0].IfName != "eth0" {
		t.Fatalf("readPlan = %+v, %v", got, err)
	}
	if l, err := got.Attachments[0].List(); err != nil || l.Name != "c" {
		t.Errorf("List = %v, %v", l, err)
	}
	if ids, _ := listPlans(dir); !slices.Equal(ids, []string{"abc"}) {
		t.Errorf("listPlans = %v", ids)
	}
	data, _ := os.ReadFile(planPath(dir, "abc"))
	for name, content := range map[string][]byte{
		"truncated":  data[:len(data)/2],
		"empty":      nil,
		"wrong kind": []byte(`{"kind":"other","containerID":"abc","attachments":[]}`),
		"other id":   []byte(`{"kind":"multinetCacheV1","containerID":"xyz","attachments":[]}`),
		"no ifname":  []byte(`{"kind":"multinetCacheV1","containerID":"abc","attachments":[{"name":"a"}]}`),
	} {
		os.WriteFile(planPath(dir, "abc"), content, 0o600)
		if _, err := readPlan(dir, "abc"); !errors.Is(err, errCorruptPlan) {
			t.Errorf("%s: readPlan error = %v, want errCorruptPlan", name, err)
		}
	}
	if p, err := readPlan(dir, "missing"); p != nil || err != nil {
		t.Errorf("missing plan: %v %v", p, err)
	}
	if err := removePlan(dir, "abc"); err != nil || removePlan(dir, "abc") != nil {
		t.Errorf("removePlan: %v", err)
	}
}

// §7.3: a second operation on the same container waits for the first; a
// lock file removed by a finishing DEL does not let two holders in.
func TestContainerLock(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l1, err := lockContainer(ctx, dir, "c1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := lockContainer(ctx, dir, "c2") // other containers run in parallel
	if err != nil {
		t.Fatal(err)
	}
	other.unlock(false)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := lockContainer(short, dir, "c1"); err == nil {
		t.Fatal("second lock acquired while the first is held")
	}
	got := make(chan *containerLock)
	go func() {
		l, err := lockContainer(ctx, dir, "c1")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("waiter got the lock early")
	case <-time.After(30 * time.Millisecond):
	}
	l1.unlock(true) // DEL removes the file while holding it
	l2 := <-got
	// The waiter holds a lock on the current file, which is exclusive.
	if _, err := os.Stat(filepath.Join(dir, "c1.lock")); err != nil {
		t.Errorf("lock file after re-lock: %v", err)
	}
	short2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := lockContainer(short2, dir, "c1"); err == nil {
		t.Error("a third holder got in after the file was replaced")
	}
	l2.unlock(false)
}

func TestSelfContainedMergesCNIArgs(t *testing.T) {
	l, err := spec.ParseAny([]byte(`{"cniVersion":"0.4.0","name":"n","type":"bridge","args":{"cni":{"a":"nad","b":"nad"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := selfContained(l, func(b []byte) ([]byte, error) {
		var m map[string]any
		json.Unmarshal(b, &m)
		m["args"].(map[string]any)["cni"].(map[string]any)["a"] = "pod"
		return json.Marshal(m)
	})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := spec.ParseConfList(out)
	if err != nil || l2.Name != "n" || l2.Version() != "0.4.0" || len(l2.Plugins) != 1 {
		t.Fatalf("round trip: %v %+v", err, l2)
	}
	if !strings.Contains(string(l2.Plugins[0].Bytes), `"a":"pod"`) || !strings.Contains(string(l2.Plugins[0].Bytes), `"b":"nad"`) {
		t.Errorf("plugin = %s", l2.Plugins[0].Bytes)
	}
}

func TestClusterFromDisk(t *testing.T) {
	dir := t.TempDir()
	confDir := filepath.Join(dir, "net.d")
	os.MkdirAll(confDir, 0o755)
	os.WriteFile(filepath.Join(confDir, "00-multinet.conflist"), []byte(`{"cniVersion":"1.0.0","name":"multinet","plugins":[{"type":"multinet"}]}`), 0o644)
	os.WriteFile(filepath.Join(confDir, "10-a.conf"), []byte(`{"cniVersion":"1.0.0","name":"a","type":"bridge"}`), 0o644)
	os.WriteFile(filepath.Join(confDir, "20-b.conflist"), []byte(`{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"ptp"}]}`), 0o644)
	for _, tc := range []struct {
		cn, want string
		onDisk   bool
	}{
		{confDir, "a", true}, // directory: first file that is not multinet's
		{filepath.Join(confDir, "20-b.conflist"), "b", true},
		{"b", "b", true}, // a network name in confDir
		{"some-nad", "", false},
		{"ns/some-nad", "", false},
	} {
		l, onDisk, err := clusterFromDisk(&Config{ClusterNetwork: tc.cn, ConfDir: confDir})
		name := ""
		if l != nil {
			name = l.Name
		}
		if onDisk != tc.onDisk || name != tc.want || (tc.onDisk && err != nil) {
			t.Errorf("clusterFromDisk(%q) = %q, %v, %v; want %q, %v", tc.cn, name, onDisk, err, tc.want, tc.onDisk)
		}
	}
	if _, onDisk, err := clusterFromDisk(&Config{ClusterNetwork: filepath.Join(dir, "missing.conf")}); !onDisk || spec.AsError(err, 0).Code != spec.ErrTryAgainLater {
		t.Errorf("missing path: %v %v", onDisk, err)
	}
}

// verbError gives every error one "multinet: <who>: <VERB> failed: "
// prefix and keeps the CNI code.
func TestVerbError(t *testing.T) {
	a := &skel.CmdArgs{ContainerID: "c1", Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=x"}
	cases := []struct {
		verb string
		args string
		want string
	}{
		{spec.CmdAdd, a.Args, "multinet: pod default/x: ADD failed: invalid annotation"},
		{spec.CmdDel, "", "multinet: container c1: DEL failed: invalid annotation"},
		{spec.CmdGC, a.Args, "multinet: GC failed: invalid annotation"},
	}
	for _, c := range cases {
		b := *a
		b.Args = c.args
		ce := spec.AsError(verbError(&b, c.verb, spec.Errorf(spec.ErrInvalidNetworkConfig, "invalid annotation")), 0)
		if ce.Msg != c.want || ce.Code != spec.ErrInvalidNetworkConfig {
			t.Errorf("%s: %d %q, want %d %q", c.verb, ce.Code, ce.Msg, spec.ErrInvalidNetworkConfig, c.want)
		}
	}
	if verbError(a, spec.CmdAdd, nil) != nil {
		t.Error("no error became one")
	}
}
