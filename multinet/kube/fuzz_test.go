package kube

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// FuzzKubeconfig: the thin plugin's kubeconfig reader against kubectl's
// (client-go clientcmd). Never a panic; errors name the file; the files
// it reads are resolved against the kubeconfig's directory; and where
// clientcmd reads the same current context, cluster and user, both give
// the same server, TLS verification, certificate authority, token and
// token file.
func FuzzKubeconfig(f *testing.F) {
	for _, s := range []string{
		`apiVersion: v1
kind: Config
current-context: b
clusters:
- name: c1
  cluster: {server: "https://one:6443", certificate-authority-data: "Q0FEQVRB"}
- name: c2
  cluster: {server: "https://two:6443", certificate-authority: ca.pem, insecure-skip-tls-verify: false}
users:
- name: u1
  user: {token: "t1"}
- name: u2
  user: {tokenFile: tok, client-certificate: /etc/c.pem, client-key-data: "S0VZ"}
contexts:
- name: a
  context: {cluster: c1, user: u1}
- name: b
  context: {cluster: c2, user: u2}
`,
		`{"current-context":"x","clusters":[{"name":"c","cluster":{"server":"https://[::1]:6443","insecure-skip-tls-verify":true}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"users":[{"name":"u","user":{"token":"abc"}}]}`,
		"clusters:\n- name: c\n  cluster:\n    server: &s https://h:1\n    certificate-authority-data: |\n      Q0FE\n      REFUQQ==\ncontexts:\n- name: only\n  context: {cluster: c}\n",
		"current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\n- name: a\n  context: {cluster: d}\nclusters:\n- name: c\n  cluster: {server: https://c}\n- name: d\n  cluster: {server: https://d}\n",
		"clusters: 5\n", "---\n", "",
	} {
		f.Add([]byte(s))
	}
	const path = "/etc/kube/kubeconfig"
	f.Fuzz(func(t *testing.T, data []byte) {
		var read []string
		readFile := func(p string) ([]byte, error) {
			read = append(read, p)
			return []byte("file:" + p), nil
		}
		c, err := parseKubeconfig(path, data, readFile)
		for _, p := range read {
			if !filepath.IsAbs(p) {
				t.Fatalf("read %q, not resolved against %s", p, filepath.Dir(path))
			}
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "kubeconfig "+path+": ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if c.Server == "" {
			t.Fatal("accepted without a server")
		}
		if c.TokenFile != "" && !filepath.IsAbs(c.TokenFile) {
			t.Fatalf("tokenFile %q not resolved", c.TokenFile)
		}
		kc, err := clientcmd.Load(data)
		if err != nil || kc.CurrentContext == "" {
			return
		}
		ctx := kc.Contexts[kc.CurrentContext]
		if ctx == nil || kc.Clusters[ctx.Cluster] == nil {
			return
		}
		cl := kc.Clusters[ctx.Cluster]
		if cl.Server != c.Server || cl.InsecureSkipTLSVerify != c.Insecure {
			t.Fatalf("server %q insecure %v; kubectl reads %q %v", c.Server, c.Insecure, cl.Server, cl.InsecureSkipTLSVerify)
		}
		if len(cl.CertificateAuthorityData) > 0 && !bytes.Equal(cl.CertificateAuthorityData, c.CAData) {
			t.Fatalf("certificate authority %q; kubectl reads %q", c.CAData, cl.CertificateAuthorityData)
		}
		if u := kc.AuthInfos[ctx.AuthInfo]; u != nil && (u.Token != c.Token || (u.TokenFile == "") != (c.TokenFile == "")) {
			t.Fatalf("token %q file %q; kubectl reads %q %q", c.Token, c.TokenFile, u.Token, u.TokenFile)
		}
	})
}
