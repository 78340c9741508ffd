package daemon

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/plugin"
	"github.com/patchbay-cni/patchbay/multinet/shim"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"clusterNetwork": "/etc/cni/net.d/10-x.conflist", "cniVersion": "0.3.1", "multusConfigFile": "auto", "logLevel": "verbose"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.SocketDir != shim.DefaultSocketDir || c.MetricsAddress != DefaultMetricsAddress || c.MaxParallelRequests != DefaultMaxParallel {
		t.Errorf("defaults: %+v", c)
	}
	if !slices.Equal(c.Ignored, []string{"cniVersion", "multusConfigFile"}) {
		t.Errorf("ignored keys = %v", c.Ignored)
	}
	if c.Plugin.ClusterNetwork != "/etc/cni/net.d/10-x.conflist" || c.Plugin.CNIDir != "/var/lib/cni/multus" {
		t.Errorf("multinet's configuration: %+v", c.Plugin)
	}
	c, err = ParseConfig([]byte(`{"clusterNetwork": "x", "socketDir": "/host/run/multinet", "metricsAddress": "0.0.0.0:1", "metricsPort": 9099}`))
	if err != nil || c.SocketDir != "/host/run/multinet" || c.MetricsAddress != "0.0.0.0:9099" {
		t.Errorf("socketDir, metricsPort: %+v, %v", c, err)
	}
	if c, err = ParseConfig([]byte(`{"clusterNetwork": "x", "daemonSocketDir": "/d"}`)); err != nil || c.SocketDir != "/d" {
		t.Errorf("daemonSocketDir: %+v, %v", c, err)
	}
	// Fields that are not keys of the file stay the daemon's own.
	if c, err = ParseConfig([]byte(`{"clusterNetwork": "x", "ignored": ["bogus"], "plugin": {"cniDir": "/elsewhere"}}`)); err != nil ||
		len(c.Ignored) != 0 || c.Plugin.CNIDir != plugin.DefaultCNIDir {
		t.Errorf("ignored, plugin: %+v, %v", c, err)
	}
	for doc, want := range map[string]string{
		`{}`: `"clusterNetwork" is required`,
		`{"clusterNetwork": "x", "socketDir": "/a", "daemonSocketDir": "/b"}`: `"socketDir" "/a" and "daemonSocketDir" "/b" differ`,
		`{"clusterNetwork": "x", "socketDir": 5}`:                             `"socketDir": must be a string`,
		`{"clusterNetwork": "x", "metricsAddress": "nope"}`:                   `"metricsAddress" "nope"`,
		`{"clusterNetwork": "x", "metricsPort": 70000}`:                       `"metricsPort" 70000`,
		`{"clusterNetwork": "x", "metricsAddress": "127.0.0.1:99999"}`:        `"metricsAddress" "127.0.0.1:99999"`,
		`{"clusterNetwork": "x", "maxParallelRequests": -1}`:                  `none may be negative`,
		`{"clusterNetwork": "x", "requestTimeoutSeconds": 9223372037}`:        `"requestTimeoutSeconds" 9223372037`,
		`{"clusterNetwork": "x", "chrootDir": "/does/not/exist"}`:             `"chrootDir" "/does/not/exist" is not a directory`,
		`{"clusterNetwork": "x", "logLevel": "loud"}`:                         `"logLevel" "loud"`,
		`{"clusterNetwork": "x", "globalNamespaces": 3}`:                      `globalNamespaces`,
		`[1]`: `not a JSON object`,
	} {
		if _, err := ParseConfig([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig(%s) = %v, want an error containing %s", doc, err, want)
		}
	}
}

// A request runs with the request's own keys (cniVersion, name,
// runtimeConfig, prevResult ...) and the daemon's multinet keys, which win;
// the shim's key goes, the type becomes multinet.
func TestRequestConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"clusterNetwork": "/cluster.conflist", "cniDir": "/var/lib/mn", "binDir": "/opt/cni/bin", "cniVersion": "0.3.1"}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.RequestConfig([]byte(`{"cniVersion": "1.0.0", "name": "multinet", "type": "multinet-shim", "daemonSocketDir": "/run/x",
		"cniDir": "/elsewhere", "runtimeConfig": {"portMappings": []}, "prevResult": {"cniVersion": "1.0.0"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(got, &m)
	want := map[string]any{"cniVersion": "1.0.0", "name": "multinet", "type": "multinet", "clusterNetwork": "/cluster.conflist",
		"cniDir": "/var/lib/mn", "binDir": "/opt/cni/bin", "runtimeConfig": map[string]any{"portMappings": []any{}},
		"prevResult": map[string]any{"cniVersion": "1.0.0"}}
	if b1, b2 := mustJSON(m), mustJSON(want); b1 != b2 {
		t.Errorf("request configuration\n got %s\nwant %s", b1, b2)
	}
	if _, err := c.RequestConfig([]byte(`"x"`)); err == nil {
		t.Error("a non-object configuration was accepted")
	}
	// With chrootDir, binDir is a host path found through the chroot.
	root := t.TempDir()
	c, _ = ParseConfig([]byte(`{"clusterNetwork": "x", "binDir": "/opt/cni/bin", "chrootDir": "` + root + `"}`))
	got, _ = c.RequestConfig([]byte(`{"cniVersion": "1.0.0", "name": "n"}`))
	json.Unmarshal(got, &m)
	if m["binDir"] != root+"/opt/cni/bin" {
		t.Errorf("binDir under chrootDir = %v", m["binDir"])
	}
	// A trailing slash: the delegates found there still run at host paths.
	c, _ = ParseConfig([]byte(`{"clusterNetwork": "x", "binDir": "/opt/cni/bin", "chrootDir": "` + root + `/"}`))
	got, _ = c.RequestConfig([]byte(`{"cniVersion": "1.0.0", "name": "n"}`))
	json.Unmarshal(got, &m)
	e := &executor{chroot: c.ChrootDir}
	if path, _, _ := e.prepare(root+"/opt/cni/bin/bridge", nil); m["binDir"] != root+"/opt/cni/bin" || path != "/opt/cni/bin/bridge" {
		t.Errorf("chrootDir %s/: binDir %v, delegate run as %s", root, m["binDir"], path)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestAPILabels(t *testing.T) {
	for _, c := range []struct{ method, url, wantMethod, wantResource string }{
		{"GET", "https://h/api/v1/namespaces/ns/pods/p1", "GET", "pods"},
		{"GET", "https://h/api/v1/pods?fieldSelector=spec.nodeName%3Dn", "LIST", "pods"},
		{"GET", "https://h/api/v1/pods?watch=true&resourceVersion=5", "WATCH", "pods"},
		{"PATCH", "https://h/api/v1/namespaces/ns/pods/p1/status", "PATCH", "pods/status"},
		{"POST", "https://h/api/v1/namespaces/ns/events", "POST", "events"},
		{"GET", "https://h/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/blue", "GET", "network-attachment-definitions"},
		{"GET", "https://h/apis/k8s.cni.cncf.io/v1/network-attachment-definitions", "LIST", "network-attachment-definitions"},
		{"GET", "https://h/version", "GET", "other"},
	} {
		req, _ := http.NewRequest(c.method, c.url, nil)
		if m, r := apiLabels(req); m != c.wantMethod || r != c.wantResource {
			t.Errorf("%s %s → %s %s, want %s %s", c.method, c.url, m, r, c.wantMethod, c.wantResource)
		}
	}
}

// The token is read again when the file changes (renamed into place as the
// kubelet does, or rewritten), not otherwise; while the file is missing the
// last token is kept.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	write := func(s string) {
		tmp := filepath.Join(dir, ".tmp")
		os.WriteFile(tmp, []byte(s), 0o600)
		os.Rename(tmp, path)
	}
	tf := &tokenFile{path: path}
	if _, err := tf.get(); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("missing file: %v", err)
	}
	write("one\n")
	if tok, err := tf.get(); tok != "one" || err != nil {
		t.Errorf("get = %q, %v", tok, err)
	}
	write("two")
	if tok, _ := tf.get(); tok != "two" {
		t.Errorf("after the rename: %q", tok)
	}
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(path, []byte("thr"), 0o600) // same size, in place
	if tok, _ := tf.get(); tok != "thr" {
		t.Errorf("after rewriting in place: %q", tok)
	}
	os.Remove(path)
	if tok, err := tf.get(); tok != "thr" || err != nil {
		t.Errorf("file gone: %q, %v; want the last token", tok, err)
	}
}

func TestExecutorEnvironmentAndChroot(t *testing.T) {
	e := &executor{chroot: "/host", baseEnv: []string{"PATH=/usr/bin", "CNI_LOG_LEVEL=debug"}}
	path, env, verb := e.prepare("/host/opt/cni/bin/bridge", []string{
		"HOME=/root", "KUBERNETES_SERVICE_HOST=10.0.0.1", // the daemon's own: not passed on
		"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/run/netns/x", "CNI_IFNAME=eth0", "CNI_ARGS=A=1",
		"CNI_PATH=/host/opt/cni/bin:/host/usr/lib/cni",
	})
	want := []string{"PATH=/usr/bin", "CNI_LOG_LEVEL=debug", "CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/run/netns/x",
		"CNI_IFNAME=eth0", "CNI_ARGS=A=1", "CNI_PATH=/opt/cni/bin:/usr/lib/cni"}
	if path != "/opt/cni/bin/bridge" || verb != "ADD" || !slices.Equal(env, want) {
		t.Errorf("prepare = %s %s\n%q\nwant %q", path, verb, env, want)
	}
	if got := chrootPath("/host", "/opt/cni/bin::/x"); got != "/host/opt/cni/bin:/host/x" {
		t.Errorf("chrootPath = %s", got)
	}
	// A relative directory or ".." stays inside the root, where the host
	// path it names is.
	if got := chrootPath("/host", "bin:/../../usr/lib/cni/"); got != "/host/bin:/host/usr/lib/cni" {
		t.Errorf("chrootPath = %s", got)
	}
	if got := chrootPath("/host", ""); got != "/host/opt/cni/bin" {
		t.Errorf("chrootPath of nothing = %s", got)
	}
	if got := unchroot("/host", "/hostile/x"); got != "/hostile/x" {
		t.Errorf("unchroot of a path outside = %s", got)
	}
}
