package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/kube"
	"github.com/patchbay-cni/patchbay/spec"
)

func TestRuntimeCNIVersion(t *testing.T) {
	current := []string{"1.0.0", "1.1.0"}
	for _, tc := range []struct {
		runtime  string
		version  string
		versions []string
	}{
		{"containerd://1.6.20", "1.0.0", current},
		{"containerd://1.7.13-k3s1", "1.0.0", current},
		{"containerd://v2.0.0", "1.0.0", current},
		{"containerd://2.1.4", "1.0.0", current},
		{"containerd://1.5.18", "0.4.0", nil},
		{"containerd://1.4.0", "0.4.0", nil},
		{"cri-o://1.23.5", "0.4.0", nil},
		{"cri-o://1.24.1", "1.0.0", current},
		{"cri-o://1.33.0", "1.0.0", current},
		{"docker://24.0.7", "1.0.0", current}, // unknown to us: assumed current, said so
		{"", "1.0.0", current},
		{"containerd://weird", "1.0.0", current},
	} {
		v, vs, why := RuntimeCNIVersion(tc.runtime)
		if v != tc.version || !slices.Equal(vs, tc.versions) || why == "" {
			t.Errorf("RuntimeCNIVersion(%q) = %s %v (%s), want %s %v", tc.runtime, v, vs, why, tc.version, tc.versions)
		}
		// What every runtime of that libcni picks from the conflist.
		l := map[string]any{"cniVersion": v, "name": "m", "plugins": []any{map[string]any{"type": "multinet"}}}
		if vs != nil {
			l["cniVersions"] = vs
		}
		b, _ := json.Marshal(l)
		if _, err := spec.ParseConfList(b); err != nil {
			t.Errorf("%s: the conflist does not load: %v", tc.runtime, err)
		}
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const testClusterConf = `{"cniVersion":"1.0.0","name":"cluster","plugins":[{"type":"bridge"}]}`

// The conflist's name sorts before every other configuration, whatever
// the others are called; our older files are reported for removal.
func TestConfName(t *testing.T) {
	for _, tc := range []struct {
		files []string
		want  string
	}{
		{nil, "00-multinet.conflist"},
		{[]string{"10-flannel.conflist"}, "00-multinet.conflist"},
		{[]string{"00-calico.conflist"}, "00-0-multinet.conflist"},
		{[]string{"00-00-x.conf", "05-y.conf"}, "00-00-0-multinet.conflist"},
		{[]string{"0.conf"}, "0.0-multinet.conflist"},
		{[]string{"-a.json"}, "-0-multinet.conflist"},
		{[]string{"00-multinet.conflist"}, "00-0-multinet.conflist"}, // someone else's file by our name
	} {
		dir := t.TempDir()
		for _, f := range tc.files {
			writeFiles(t, dir, map[string]string{f: testClusterConf})
		}
		got, ours, err := confName(dir)
		if err != nil || got != tc.want || len(ours) != 0 {
			t.Errorf("%v: confName = %q %v %v, want %q", tc.files, got, ours, err, tc.want)
			continue
		}
		if len(tc.files) > 0 && got >= tc.files[0] {
			t.Errorf("%v: %q does not sort first", tc.files, got)
		}
	}
}

// fakeImage is an image root: multinet and the shim (copies of a real
// program, so they can run), and a patchbay-plugins that lists two types.
func fakeImage(t *testing.T, marker string) string {
	t.Helper()
	src := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	// Trailing bytes make two "versions" of one program that both run.
	b = append(b, marker...)
	for _, n := range []string{MultinetBinary, ShimBinary} {
		if err := os.WriteFile(filepath.Join(src, n), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := "#!/bin/sh\n# " + marker + "\necho bridge host-local\n"
	if err := os.WriteFile(filepath.Join(src, PluginsBinary), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return src
}

func TestInstallBinariesPolicies(t *testing.T) {
	src := fakeImage(t, "v1")
	bin := t.TempDir()
	// Another vendor's bridge stays unless asked; a link to ours is ours.
	writeFiles(t, bin, map[string]string{"bridge": "vendor"})
	if err := os.Symlink(PluginsBinary, filepath.Join(bin, "host-local")); err != nil {
		t.Fatal(err)
	}
	written, kept, err := InstallBinaries(src, bin, ModeThin, PluginsMissing)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(written, []string{"multinet", "patchbay-plugins", "host-local"}) || !slices.Equal(kept, []string{"bridge"}) {
		t.Errorf("missing: wrote %v kept %v", written, kept)
	}
	if b, _ := os.ReadFile(filepath.Join(bin, "bridge")); string(b) != "vendor" {
		t.Errorf("the vendor's bridge was replaced: %q", b)
	}
	if _, err := os.Stat(filepath.Join(bin, ShimBinary)); !os.IsNotExist(err) {
		t.Errorf("thin mode installed the shim: %v", err)
	}
	written, kept, err = InstallBinaries(src, bin, ModeThick, PluginsReplace)
	if err != nil || !slices.Equal(written, []string{"multinet", "multinet-shim", "patchbay-plugins", "bridge", "host-local"}) || kept != nil {
		t.Errorf("replace: wrote %v kept %v %v", written, kept, err)
	}
	if target, err := os.Readlink(filepath.Join(bin, "bridge")); err != nil || target != PluginsBinary {
		t.Errorf("bridge after replace: %q %v", target, err)
	}
	bin2 := t.TempDir()
	written, _, err = InstallBinaries(src, bin2, ModeThick, PluginsNone)
	if err != nil || !slices.Equal(written, []string{"multinet", "multinet-shim"}) {
		t.Errorf("none: wrote %v %v", written, err)
	}
	des, _ := os.ReadDir(bin)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".") {
			t.Errorf("temporary file left: %s", de.Name())
		}
	}
}

// Replacing binaries that are running, and being executed in a loop, never
// fails with "text file busy" and never shows a partial file: each exec
// runs the old or the new program.
func TestInstallBinariesWhileRunning(t *testing.T) {
	v1, v2 := fakeImage(t, "v1"), fakeImage(t, "v2")
	bin := t.TempDir()
	if _, _, err := InstallBinaries(v1, bin, ModeThick, PluginsMissing); err != nil {
		t.Fatal(err)
	}
	// A long-running process of the installed file (the daemon, a plugin).
	running := exec.Command(filepath.Join(bin, MultinetBinary), "30")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { running.Process.Kill(); running.Wait() }()
	// Writing in place is what fails.
	f, err := os.OpenFile(filepath.Join(bin, MultinetBinary), os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		f.Close()
		t.Fatal("opening a running binary for writing succeeded: this kernel does not show the problem the test is about")
	}
	if !strings.Contains(err.Error(), "text file busy") {
		t.Fatalf("in-place write: %v, want text file busy", err)
	}
	// The runtime execs plugins from processes of its own: a loop in
	// another process (an exec from this one could inherit, between fork
	// and exec, the write descriptor of a file being copied: Go issue 22315).
	stopFile := filepath.Join(t.TempDir(), "stop")
	loop := exec.Command("sh", "-c", `n=0; while [ ! -e "$1" ]; do out=$("$2") || echo "FAIL $?"; [ "$out" = "bridge host-local" ] || echo "BAD $out"; n=$((n+1)); done; echo "EXECS $n"`,
		"sh", stopFile, filepath.Join(bin, "bridge"))
	var loopOut bytes.Buffer
	loop.Stdout, loop.Stderr = &loopOut, &loopOut
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < 20; i++ {
		src := v1
		if i%2 == 0 {
			src = v2
		}
		if _, _, err := InstallBinaries(src, bin, ModeThick, PluginsMissing); err != nil {
			os.WriteFile(stopFile, nil, 0o644)
			loop.Wait()
			t.Fatalf("install %d over running binaries: %v", i, err)
		}
	}
	os.WriteFile(stopFile, nil, 0o644)
	if err := loop.Wait(); err != nil {
		t.Fatalf("exec loop: %v %s", err, loopOut.String())
	}
	out := loopOut.String()
	if strings.Contains(out, "FAIL") || strings.Contains(out, "BAD") || !strings.Contains(out, "EXECS") {
		t.Errorf("execs during the installs failed:\n%s", out)
	}
	t.Logf("exec loop during 20 installs: %s", strings.TrimSpace(out))
	if running.ProcessState != nil {
		t.Errorf("the running binary exited: %v", running.ProcessState)
	}
	got, _ := os.ReadFile(filepath.Join(bin, MultinetBinary))
	if !bytes.HasSuffix(got, []byte("v1")) {
		t.Errorf("last install (v1) not in place")
	}
}

// fakeSA is a pod's service account directory.
func fakeSA(t *testing.T, token string) string {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"ca.crt": testCA, "token": token, "namespace": "kube-system"})
	return dir
}

// The CA file's bytes are copied and read back, never parsed here.
const testCA = "-----BEGIN CERTIFICATE-----\nbm90IGEgcmVhbCBjZXJ0aWZpY2F0ZQ==\n-----END CERTIFICATE-----\n"

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestInstallNodeThinThenThick(t *testing.T) {
	conf, bin := t.TempDir(), t.TempDir()
	cfg := `{"clusterNetwork": "` + conf + `", "logLevel": "verbose", "capabilities": {"portMappings": true}, "namespaceIsolation": true}`
	o := &NodeInstall{Mode: ModeThin, Config: []byte(cfg), SrcDir: fakeImage(t, "v1"), BinDir: bin, ConfDir: conf,
		SADir: fakeSA(t, "pod-token-1"), KubeServer: "https://10.96.0.1:443", Timeout: 500 * time.Millisecond, Log: quietLog()}
	// §6.1: no cluster network yet, so nothing in the conf dir (binaries are fine).
	if _, err := InstallNode(context.Background(), o); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("install without a cluster network: %v", err)
	}
	if des, _ := os.ReadDir(conf); len(des) != 0 {
		t.Fatalf("conf dir written before the cluster network was ready: %v", des)
	}
	if _, err := os.Stat(filepath.Join(bin, MultinetBinary)); err != nil {
		t.Errorf("binaries: %v", err)
	}
	// The cluster network arrives while we wait; an old multinet file by
	// another name is replaced.
	writeFiles(t, conf, map[string]string{"05-old-multinet.conf": `{"cniVersion":"0.4.0","name":"m","type":"multinet","clusterNetwork":"x"}`})
	go func() {
		time.Sleep(300 * time.Millisecond)
		writeFiles(t, conf, map[string]string{"10-cluster.conflist": testClusterConf})
	}()
	o.Timeout = 10 * time.Second
	inst, err := InstallNode(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if inst.ConfPath != filepath.Join(conf, ConfName) || inst.TokenSource != tokenPod {
		t.Errorf("installed %+v", inst)
	}
	if _, err := os.Stat(filepath.Join(conf, "05-old-multinet.conf")); !os.IsNotExist(err) {
		t.Errorf("older multinet conf not removed: %v", err)
	}
	b, _ := os.ReadFile(inst.ConfPath)
	l, err := spec.ParseConfList(b)
	if err != nil || l.CNIVersion != "1.0.0" || !slices.Equal(l.CNIVersions, []string{"1.0.0", "1.1.0"}) || len(l.Plugins) != 1 {
		t.Fatalf("conflist %s: %v", b, err)
	}
	pc, err := ParseConfig(l.Plugins[0].Bytes)
	if err != nil || pc.Type != "multinet" || pc.ClusterNetwork != conf || !pc.NamespaceIsolation || pc.Kubeconfig != filepath.Join(conf, CredentialsDir, KubeconfigName) {
		t.Errorf("multinet plugin %s: %+v %v", l.Plugins[0].Bytes, pc, err)
	}
	var entry struct{ Capabilities map[string]bool }
	if json.Unmarshal(l.Plugins[0].Bytes, &entry); !entry.Capabilities["portMappings"] {
		t.Errorf("capabilities lost: %s", l.Plugins[0].Bytes)
	}
	// The thin plugin reads the kubeconfig and its token.
	kc, err := kube.LoadKubeconfig(pc.Kubeconfig)
	if err != nil || kc.Server != "https://10.96.0.1:443" || string(kc.CAData) != testCA {
		t.Fatalf("kubeconfig: %+v %v", kc, err)
	}
	if tok, _ := os.ReadFile(kc.TokenFile); string(tok) != "pod-token-1" {
		t.Errorf("token file %s: %q", kc.TokenFile, tok)
	}
	// The cluster network resolves past our file (the plugin's own rule).
	if cl, _, err := clusterFromDisk(pc); err != nil || cl.Name != "cluster" {
		t.Errorf("clusterNetwork resolves to %+v %v", cl, err)
	}
	if p, ok := InstalledConf(conf); !ok || p != inst.ConfPath {
		t.Errorf("InstalledConf = %s %v", p, ok)
	}

	// Thick over thin: the shim's conflist; the daemon resolves the same
	// directory past it.
	o.Mode, o.CNIVersion = ModeThick, "0.4.0"
	inst, err = InstallNode(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(inst.ConfPath)
	l, err = spec.ParseConfList(b)
	if err != nil || l.CNIVersion != "0.4.0" || l.CNIVersions != nil || l.Plugins[0].Network.Type != ShimType {
		t.Fatalf("thick conflist %s: %v", b, err)
	}
	var shim map[string]any
	json.Unmarshal(l.Plugins[0].Bytes, &shim)
	if shim["daemonSocketDir"] != DefaultDaemonSocketDir || shim["capabilities"] == nil || shim["clusterNetwork"] != nil {
		t.Errorf("shim entry %s", l.Plugins[0].Bytes)
	}
	if cl, _, err := clusterFromDisk(pc); err != nil || cl.Name != "cluster" {
		t.Errorf("with the shim's file, clusterNetwork resolves to %+v %v", cl, err)
	}
	if _, err := os.Stat(filepath.Join(bin, ShimBinary)); err != nil {
		t.Errorf("thick mode: shim: %v", err)
	}

	removed, err := Uninstall(conf, "")
	if err != nil || len(removed) != 2 {
		t.Errorf("uninstall removed %v, %v", removed, err)
	}
	if des, _ := os.ReadDir(conf); len(des) != 1 || des[0].Name() != "10-cluster.conflist" {
		t.Errorf("after uninstall the conf dir holds %v", des)
	}
	if _, err := os.Stat(filepath.Join(bin, MultinetBinary)); err != nil {
		t.Errorf("uninstall without -binaries removed a binary: %v", err)
	}
}

func TestInstallNodeRefusesBadInput(t *testing.T) {
	conf := t.TempDir()
	writeFiles(t, conf, map[string]string{"10-cluster.conflist": testClusterConf})
	for _, tc := range []struct {
		o    NodeInstall
		want string
	}{
		{NodeInstall{Mode: "fat", Config: []byte(`{"clusterNetwork":"x"}`)}, `-mode "fat"`},
		{NodeInstall{Mode: ModeThick, Config: []byte(`{"clusterNetwork":"x"}`), Plugins: "some"}, `-plugins "some"`},
		{NodeInstall{Mode: ModeThick, Config: []byte(`{"clusterNetwork":"x"}`), CNIVersion: "0.3.1"}, `cniVersion "0.3.1"`},
		{NodeInstall{Mode: ModeThick, Config: []byte(`{"clusterNetwork":"x"}`), CNIVersion: "2.0.0"}, `cniVersion "2.0.0"`},
		{NodeInstall{Mode: ModeThick, Config: []byte(`[]`)}, "JSON object"},
		{NodeInstall{Mode: ModeThick, Config: []byte(`{"clusterNetwork":"x","type":"multinet"}`)}, `"type" is written by the installer`},
		{NodeInstall{Mode: ModeThick, Config: []byte(`{}`)}, `"clusterNetwork" is required`},
		{NodeInstall{Mode: ModeThick, Config: []byte(`{"clusterNetwork":"x","logLevel":"loud"}`)}, `"logLevel" "loud"`},
	} {
		o := tc.o
		o.BinDir, o.ConfDir, o.Log = t.TempDir(), conf, quietLog()
		if _, err := InstallNode(context.Background(), &o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.o, err, tc.want)
		}
	}
	if des, _ := os.ReadDir(conf); len(des) != 1 {
		t.Errorf("bad input wrote %v", des)
	}
}

// A fake apiserver for the installer's three calls.
type fakeAPI struct {
	srv      *httptest.Server
	mu       sync.Mutex
	requests []string
	tokens   int
	dsCode   int
	dsBody   string
}

func newFakeAPI(t *testing.T) (*fakeAPI, *InstallAPI) {
	f := &fakeAPI{dsCode: 200, dsBody: `{"metadata":{}}`}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.requests = append(f.requests, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		switch {
		case r.Method == "GET" && r.URL.Path == "/api/v1/nodes/n1":
			io.WriteString(w, `{"metadata":{"uid":"uid-1"},"status":{"nodeInfo":{"containerRuntimeVersion":"containerd://1.5.9"}}}`)
		case r.Method == "POST" && r.URL.Path == "/api/v1/namespaces/kube-system/serviceaccounts/multinet/token":
			var tr struct {
				Spec struct {
					ExpirationSeconds int64
					BoundObjectRef    struct{ Kind, Name, UID string }
				}
			}
			json.Unmarshal(body, &tr)
			if tr.Spec.BoundObjectRef.Kind != "Node" || tr.Spec.BoundObjectRef.Name != "n1" || tr.Spec.BoundObjectRef.UID != "uid-1" {
				http.Error(w, `{"message":"bad bound object"}`, 400)
				return
			}
			f.tokens++
			exp := time.Now().Add(time.Duration(tr.Spec.ExpirationSeconds) * time.Second).UTC().Format(time.RFC3339)
			io.WriteString(w, `{"status":{"token":"node-token-`+string(rune('0'+f.tokens))+`","expirationTimestamp":"`+exp+`"}}`)
		case r.URL.Path == "/apis/apps/v1/namespaces/kube-system/daemonsets/multinet":
			w.WriteHeader(f.dsCode)
			io.WriteString(w, f.dsBody)
		default:
			http.Error(w, `{"message":"unexpected"}`, 404)
		}
	}))
	t.Cleanup(f.srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("sa-token\n"), 0o600)
	api, err := NewInstallAPI(f.srv.URL, "kube-system", "multinet", ca, tok)
	if err != nil {
		t.Fatal(err)
	}
	return f, api
}

// With the API: the runtime decides the version (containerd 1.5 → 0.4.0),
// the thin plugin gets a node-bound token, renewed at half its lifetime by
// Watch, which also restores a removed conflist.
func TestInstallNodeWithAPIAndWatch(t *testing.T) {
	f, api := newFakeAPI(t)
	conf := t.TempDir()
	writeFiles(t, conf, map[string]string{"10-cluster.conflist": testClusterConf})
	o := &NodeInstall{Mode: ModeThin, Config: []byte(`{"clusterNetwork":"` + conf + `"}`), BinDir: t.TempDir(), ConfDir: conf,
		SADir: fakeSA(t, "pod-token"), API: api, NodeName: "n1", TokenLifetime: 2 * time.Second, Log: quietLog()}
	inst, err := InstallNode(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if inst.CNIVersion != "0.4.0" || inst.TokenSource != tokenNodeBound || !strings.Contains(inst.VersionReason, "containerd://1.5.9") {
		t.Errorf("installed %+v", inst)
	}
	tokPath := filepath.Join(conf, CredentialsDir, "token")
	if b, _ := os.ReadFile(tokPath); string(b) != "node-token-1" {
		t.Errorf("token %q", b)
	}
	if b, _ := os.ReadFile(inst.ConfPath); !bytes.Contains(b, []byte(`"cniVersion": "0.4.0"`)) {
		t.Errorf("conflist %s", b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Watch(ctx, o, inst, 50*time.Millisecond) }()
	os.Remove(inst.ConfPath)
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(tokPath)
		_, err := os.Stat(inst.ConfPath)
		if string(b) != "node-token-1" && err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch: token %q, conflist %v", b, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.requests {
		if !strings.HasSuffix(r, "Bearer sa-token") {
			t.Errorf("request without the service account token: %s", r)
		}
	}
}

func TestDaemonSetGone(t *testing.T) {
	f, api := newFakeAPI(t)
	for _, tc := range []struct {
		code int
		body string
		gone bool
	}{
		{200, `{"metadata":{}}`, false},
		{200, `{"metadata":{"deletionTimestamp":"2026-01-01T00:00:00Z"}}`, true},
		{404, `{"message":"not found"}`, true},
		{403, `{"message":"forbidden"}`, true},
		{401, `{"message":"Unauthorized"}`, true},
	} {
		f.mu.Lock()
		f.dsCode, f.dsBody = tc.code, tc.body
		f.mu.Unlock()
		gone, why, err := api.DaemonSetGone(context.Background(), "kube-system", "multinet")
		if err != nil || gone != tc.gone || why == "" {
			t.Errorf("%d %s: gone %v (%s) %v, want %v", tc.code, tc.body, gone, why, err, tc.gone)
		}
	}
	f.mu.Lock()
	f.dsCode, f.dsBody = 500, `{"message":"etcd"}`
	f.mu.Unlock()
	if gone, _, err := api.DaemonSetGone(context.Background(), "kube-system", "multinet"); gone || err == nil {
		t.Errorf("500: gone %v %v; want an error and no uninstall", gone, err)
	}
}

func TestUninstallBinaries(t *testing.T) {
	conf, bin := t.TempDir(), t.TempDir()
	if _, _, err := InstallBinaries(fakeImage(t, "v1"), bin, ModeThick, PluginsMissing); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, bin, map[string]string{"vendor-plugin": "x"})
	os.Symlink("elsewhere", filepath.Join(bin, "other-link"))
	if _, err := Uninstall(conf, bin); err != nil {
		t.Fatal(err)
	}
	var left []string
	des, _ := os.ReadDir(bin)
	for _, de := range des {
		left = append(left, de.Name())
	}
	if !slices.Equal(left, []string{"other-link", "vendor-plugin"}) {
		t.Errorf("left in bin: %v", left)
	}
}
