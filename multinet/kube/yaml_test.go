package kube

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Kubeconfigs as their writers produce them: the subset parser must read
// each exactly as the general YAML library does.
var kubeconfigSamples = map[string]string{
	"kubectl": `apiVersion: v1
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
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
`,
	"multus-template": `# Kubeconfig file for Multus CNI plugin.
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
`,
	"indented-sequences-comments-quotes": `---
apiVersion: v1   # trailing comment
kind: 'Config'
clusters:
  - name: "c 1"
    cluster:
      server: 'https://it''s:6443'
      insecure-skip-tls-verify: true
  - name: c2
    cluster: {server: "https://two:6443", certificate-authority: ca.pem}
users:
  - name: u
    user:
      tokenFile: /var/run/secrets/token
contexts: [{name: a, context: {cluster: "c 1", user: u}}]
current-context: a
extensions: []
`,
	"json": `{"apiVersion":"v1","kind":"Config","current-context":"a",
"clusters":[{"name":"c","cluster":{"server":"https://x:6443","insecure-skip-tls-verify":false}}],
"users":[{"name":"u","user":{"token":"t\u00e9"}}],
"contexts":[{"name":"a","context":{"cluster":"c","user":"u"}}]}`,
}

func TestParseYAMLMatchesYAMLLibrary(t *testing.T) {
	for name, doc := range kubeconfigSamples {
		got, err := decodeKubeconfig([]byte(doc))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var want kubeconfig
		if err := yaml.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatalf("%s: the YAML library: %v", name, err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, *got, want)
		}
		if got.CurrentContext == "" || len(got.Clusters) == 0 || got.Clusters[0].Cluster.Server == "" {
			t.Errorf("%s: nothing read: %+v", name, *got)
		}
	}
}

// What the subset does not read is refused with the line, never misread.
func TestParseYAMLRefusesUnsupported(t *testing.T) {
	for _, doc := range []string{
		"a: &x 1\nb: *x\n",
		"a: !!str 1\n",
		"a: |\n  text\n",
		"a: b\n---\nc: d\n",
		"a: one\n  continued\n",
		"a: {b: c,\n  d: e}\n",
		"a: \"unterminated\n",
		"a:\n\t- b\n",
		"a: b\na: c\n",
	} {
		if v, err := parseYAML([]byte(doc)); err == nil || !strings.Contains(err.Error(), "line ") {
			t.Errorf("parseYAML(%q) = %v, %v; want an error naming the line", doc, v, err)
		}
	}
}
