package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadKubeconfig(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("CA"), 0o600)
	os.WriteFile(filepath.Join(dir, "tok"), []byte("file-token\n"), 0o600)
	kc := `apiVersion: v1
kind: Config
current-context: b
clusters:
- name: c1
  cluster: {server: "https://one:6443", certificate-authority-data: "Q0FEQVRB"}
- name: c2
  cluster: {server: "https://two:6443", certificate-authority: ca.pem}
users:
- name: u1
  user: {token: "t1"}
- name: u2
  user: {tokenFile: tok}
contexts:
- name: a
  context: {cluster: c1, user: u1}
- name: b
  context: {cluster: c2, user: u2}
`
	path := filepath.Join(dir, "kubeconfig")
	os.WriteFile(path, []byte(kc), 0o600)
	c, err := LoadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server != "https://two:6443" || string(c.CAData) != "CA" || c.TokenFile != filepath.Join(dir, "tok") {
		t.Errorf("config = %+v", c)
	}
	os.WriteFile(path, []byte(strings.Replace(kc, "current-context: b", "current-context: a", 1)), 0o600)
	if c, err = LoadKubeconfig(path); err != nil || c.Server != "https://one:6443" || string(c.CAData) != "CADATA" || c.Token != "t1" {
		t.Errorf("context a: %+v, %v", c, err)
	}
	os.WriteFile(path, []byte(strings.Replace(kc, "current-context: b", "current-context: zz", 1)), 0o600)
	if _, err := LoadKubeconfig(path); err == nil || !strings.Contains(err.Error(), "zz") {
		t.Errorf("unknown context: %v", err)
	}
	if _, err := LoadKubeconfig(filepath.Join(dir, "nope")); err == nil {
		t.Error("missing file accepted")
	}
}

// Kubeconfigs as their writers produce them, and YAML that a subset parser
// would not read (anchors, block scalars, tabs in strings, documents
// markers): all read as kubectl reads them.
func TestKubeconfigSamples(t *testing.T) {
	samples := map[string]struct {
		doc           string
		server, token string
		insecure      bool
	}{
		"kubectl": {doc: `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0FEQVRB
    server: https://10.0.0.1:6443
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: kubernetes-admin
  name: kubernetes-admin@kubernetes
current-context: kubernetes-admin@kubernetes
kind: Config
preferences: {}
users:
- name: kubernetes-admin
  user:
    token: abc
`, server: "https://10.0.0.1:6443", token: "abc"},
		"multus-template": {doc: `# Kubeconfig file for Multus CNI plugin.
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://[10.96.0.1]:443
    certificate-authority-data: "Q0E="
users:
- name: multus
  user:
    token: "eyJhbGciOiJSUzI1NiJ9.x.y"
contexts:
- name: multus-context
  context:
    cluster: local
    user: multus
current-context: multus-context
`, server: "https://[10.96.0.1]:443", token: "eyJhbGciOiJSUzI1NiJ9.x.y"},
		"indented-sequences-comments-quotes": {doc: `---
apiVersion: v1   # trailing comment
kind: 'Config'
clusters:
  - name: "c 1"
    cluster:
      server: 'https://it''s:6443'
      insecure-skip-tls-verify: true
users:
  - name: u
    user:
      token: t
contexts: [{name: a, context: {cluster: "c 1", user: u}}]
current-context: a
extensions: []
`, server: "https://it's:6443", token: "t", insecure: true},
		"anchors-and-block-scalars": {doc: `apiVersion: v1
kind: Config
clusters:
- name: &c main
  cluster:
    server: >-
      https://folded:6443
users:
- name: &u me
  user:
    token: |-
      block-token
contexts:
- name: x
  context: {cluster: *c, user: *u}
current-context: x
`, server: "https://folded:6443", token: "block-token"},
		"json": {doc: `{"apiVersion":"v1","kind":"Config","current-context":"a",
"clusters":[{"name":"c","cluster":{"server":"https://x:6443","insecure-skip-tls-verify":false}}],
"users":[{"name":"u","user":{"token":"t\u00e9"}}],
"contexts":[{"name":"a","context":{"cluster":"c","user":"u"}}]}`, server: "https://x:6443", token: "té"},
	}
	dir := t.TempDir()
	for name, s := range samples {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(s.doc), 0o600)
		c, err := LoadKubeconfig(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if c.Server != s.server || c.Token != s.token || c.Insecure != s.insecure {
			t.Errorf("%s: got server %q token %q insecure %v", name, c.Server, c.Token, c.Insecure)
		}
	}
	path := filepath.Join(dir, "bad")
	os.WriteFile(path, []byte("clusters: [\n"), 0o600)
	if _, err := LoadKubeconfig(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("malformed YAML: %v", err)
	}
}

// Keys match case-sensitively, as kubectl reads them: "Cluster:" and a
// second "Server:" are not the cluster's server.
func TestKubeconfigKeysCaseSensitive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	for doc, want := range map[string]string{
		"current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\nclusters:\n- name: c\n  Cluster: {server: https://x}\n":                    "",
		"current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\nclusters:\n- name: c\n  cluster: {server: https://x, Server: https://y}\n": "https://x",
	} {
		os.WriteFile(path, []byte(doc), 0o600)
		c, err := LoadKubeconfig(path)
		switch {
		case want == "" && err == nil:
			t.Errorf("%q: read server %q; kubectl reads none", doc, c.Server)
		case want != "" && (err != nil || c.Server != want):
			t.Errorf("%q: %+v, %v; want server %s", doc, c, err, want)
		}
	}
}
