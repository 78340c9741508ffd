package daemon

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/multinet/plugin"
	"github.com/patchbay-cni/patchbay/multinet/shim"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig: the daemon's configuration file, and a request's
// configuration run with it. ParseConfig never panics; a refusal names a
// key of the file (its contract: the daemon's start fails with it); an
// accepted file gives a listener address that listens, positive limits
// and timeouts, only its own keys as "ignored", and multinet's
// configuration exactly as a request's verbs will parse it. RequestConfig
// of any request keeps the daemon's multinet keys and the type multinet.
func FuzzConfig(f *testing.F) {
	for _, s := range [][2]string{
		{`{"clusterNetwork":"/etc/cni/net.d/10-x.conflist","cniVersion":"0.3.1","multusConfigFile":"auto","logLevel":"verbose"}`, `{"cniVersion":"1.0.0","name":"multinet","type":"multinet-shim"}`},
		{`{"clusterNetwork":"x","socketDir":"/host/run/multinet","metricsAddress":"0.0.0.0:1","metricsPort":9099,"maxParallelRequests":4}`, `{"cniVersion":"1.1.0","name":"n","daemonSocketDir":"/run/x","cniDir":"/elsewhere","runtimeConfig":{"portMappings":[]}}`},
		{`{"clusterNetwork":"x","daemonSocketDir":"/d","chrootDir":"/","binDir":"/opt/cni/bin"}`, `{"binDir":"/usr/lib/cni"}`},
		{`{"clusterNetwork":"x","requestTimeoutSeconds":9223372037,"shutdownTimeoutSeconds":1}`, `{}`},
		{`{"clusterNetwork":"x","metricsAddress":"127.0.0.1:99999"}`, `{}`},
		{`{"clusterNetwork":"x","ignored":["bogus"]}`, `{}`},
		{`{"clusterNetwork":"x","nadPolicy":{"mode":"audit"},"globalNamespaces":"a,b"}`, `[]`},
		{`{"clusterNetwork":"x","logLevel":"loud"}`, `null`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	sample := []byte(`{"cniVersion":"1.1.0","name":"multinet"}`)
	f.Fuzz(func(t *testing.T, doc, req []byte) {
		var keys map[string]json.RawMessage
		if json.Unmarshal(doc, &keys) == nil && namesPolicyFile(keys) {
			return // a fuzzed path could be a device: not opened
		}
		c, err := ParseConfig(doc)
		if err != nil {
			if !namesKey(err.Error(), keys) {
				t.Fatalf("error names no key of the file: %v", err)
			}
			return
		}
		if c.SocketDir == "" || c.MaxParallelRequests <= 0 || c.requestTimeout() <= 0 || c.shutdownTimeout() <= 0 {
			t.Fatalf("accepted with socketDir %q, maxParallelRequests %d, request timeout %v, shutdown timeout %v",
				c.SocketDir, c.MaxParallelRequests, c.requestTimeout(), c.shutdownTimeout())
		}
		if _, port, err := net.SplitHostPort(c.MetricsAddress); err != nil {
			t.Fatalf("metricsAddress %q: %v", c.MetricsAddress, err)
		} else if _, err := net.LookupPort("tcp", port); err != nil {
			t.Fatalf("accepted metricsAddress %q, which does not listen: %v", c.MetricsAddress, err)
		}
		for _, k := range c.Ignored {
			if _, ok := keys[k]; !ok {
				t.Fatalf("ignored key %q is not in the file", k)
			}
		}
		stdin, err := c.RequestConfig(sample)
		if err != nil {
			t.Fatal(err)
		}
		again, err := plugin.ParseConfig(stdin)
		if err != nil {
			t.Fatalf("accepted, but a request is refused: %v", err)
		}
		if a, b := mustJSON(again), mustJSON(c.Plugin); a != b {
			t.Fatalf("the verbs read another configuration than the daemon:\n%s\n%s", a, b)
		}

		out, err := c.RequestConfig(req)
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("request configuration %s: %v", out, err)
		}
		if string(m["type"]) != `"multinet"` {
			t.Fatalf("request configuration runs %s", m["type"])
		}
		if _, ok := m["daemonSocketDir"]; ok {
			t.Fatalf("request configuration keeps the shim's key: %s", out)
		}
		for k, v := range c.delegation {
			if k == "binDir" && c.ChrootDir != "" {
				continue
			}
			if mustJSON(m[k]) != mustJSON(v) {
				t.Fatalf("request configuration has %s %s, the daemon's file %s", k, m[k], v)
			}
		}
	})
}

// namesPolicyFile says whether the file sets nadPolicyFile, in any case
// (encoding/json matches keys case-insensitively).
func namesPolicyFile(keys map[string]json.RawMessage) bool {
	for k, v := range keys {
		var s string
		if strings.EqualFold(k, "nadPolicyFile") && json.Unmarshal(v, &s) == nil && s != "" {
			return true
		}
	}
	return false
}

// namesKey says whether msg names a key of the file, the required
// clusterNetwork, or says the file is not a JSON object.
func namesKey(msg string, keys map[string]json.RawMessage) bool {
	lower := strings.ToLower(msg)
	for _, k := range append([]string{"clusterNetwork", "JSON object"}, mapKeys(keys)...) {
		if k != "" && strings.Contains(lower, strings.ToLower(k)) {
			return true
		}
	}
	return false
}

func mapKeys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// FuzzRequest: what the daemon does with a shim's request before the
// verbs run — decode it, build the verbs' configuration and environment —
// and its refusals. A request that does not decode is refused; a refusal
// is a CNI error in the version the thin plugin would answer in. With
// chrootDir, every CNI_PATH directory is looked up inside the chroot, and
// the delegates get the host directory it names.
func FuzzRequest(f *testing.F) {
	root := f.TempDir()
	cfg, err := ParseConfig([]byte(`{"clusterNetwork":"c","cniDir":"/var/lib/mn","chrootDir":"` + root + `/"}`))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"env":["CNI_COMMAND=ADD","CNI_CONTAINERID=c1","CNI_NETNS=/run/netns/x","CNI_IFNAME=eth0","CNI_PATH=/opt/cni/bin:/usr/lib/cni","PATH=/bin"],"config":"eyJjbmlWZXJzaW9uIjoiMS4wLjAiLCJuYW1lIjoibSIsInR5cGUiOiJtdWx0aW5ldC1zaGltIn0=","start":1}`,
		`{"env":["CNI_COMMAND=DEL","CNI_COMMAND=VERSION","=x","novalue","CNI_PATH=bin:/../../usr/lib/cni/"],"config":"bnVsbA==","start":-5,"sent":9}`,
		`{"env":null,"config":"eyJjbmlWZXJzaW9uIjoieCJ9"}`,
		`{"config":"!!"}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, env, err := decodeRequest(data)
		if err != nil {
			checkRefusal(t, refusal(nil, spec.ErrInternal, "multinet daemon: unreadable request: "+err.Error()), nil)
			return
		}
		checkRefusal(t, refusal(req.Config, spec.ErrTryAgainLater, "multinet daemon: shutting down; try again"), req.Config)
		stdin, venv := cfg.prepare(env, req)
		if stdin == nil && req.Config != nil {
			t.Fatal("no configuration for the verbs")
		}
		var host []string
		for _, d := range filepath.SplitList(env["CNI_PATH"]) {
			if d != "" {
				host = append(host, filepath.Clean("/"+d))
			}
		}
		if len(host) == 0 {
			host = []string{plugin.DefaultBinDir}
		}
		dirs := filepath.SplitList(venv["CNI_PATH"])
		if len(dirs) != len(host) {
			t.Fatalf("CNI_PATH %q became %q", env["CNI_PATH"], venv["CNI_PATH"])
		}
		for _, d := range dirs {
			if rel, err := filepath.Rel(root, d); err != nil || strings.HasPrefix(rel, "..") || !strings.HasPrefix(d, "/") {
				t.Fatalf("CNI_PATH %q: %q is not inside the chroot %s", env["CNI_PATH"], d, root)
			}
		}
		// What a delegate run from the first directory gets.
		e := &executor{chroot: cfg.ChrootDir}
		path, denv, _ := e.prepare(filepath.Join(dirs[0], "bridge"), []string{"CNI_PATH=" + venv["CNI_PATH"]})
		if path != filepath.Join(host[0], "bridge") || len(denv) != 1 || denv[0] != "CNI_PATH="+strings.Join(host, ":") {
			t.Fatalf("CNI_PATH %q: the delegate %s gets %q, want the host's %q", env["CNI_PATH"], path, denv, host)
		}
	})
}

// checkRefusal: an answer with exit code 1 whose stdout is a CNI error in
// the configuration's version when it is one we speak, else in ours (as
// skel answers).
func checkRefusal(t *testing.T, r *shim.Response, config []byte) {
	t.Helper()
	if r.ExitCode != 1 {
		t.Fatalf("refusal with exit code %d", r.ExitCode)
	}
	e, ok := spec.ParseError(r.Stdout)
	if !ok || e.Code == 0 || e.Msg == "" {
		t.Fatalf("refusal is not a CNI error: %q", r.Stdout)
	}
	var c struct {
		CNIVersion string `json:"cniVersion"`
	}
	_ = json.Unmarshal(config, &c)
	want := spec.ConfigVersion(c.CNIVersion)
	if !spec.IsSupported(want) {
		want = spec.Current
	}
	if e.CNIVersion != want {
		t.Fatalf("refusal in version %q for a configuration of version %q", e.CNIVersion, c.CNIVersion)
	}
}
