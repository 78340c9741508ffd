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
