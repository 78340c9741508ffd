// Package kube is the thin Kubernetes API client of multinet: exactly the
// calls one CNI invocation needs (GET pod, GET NetworkAttachmentDefinition,
// PATCH pod status, POST event) over net/http with raw JSON.
//
// It does not use client-go: measured on this machine, a binary that merely
// links client-go's typed clientset and clientcmd takes ~10 ms to start
// (6.6 ms of package init: scheme registration of every API group), client-go
// rest + clientcmd ~4 ms, and net/http + sigs.k8s.io/yaml ~1.8 ms. multinet
// runs once per pod per verb, so start-up is on every pod's critical path and
// the 3 ms overhead budget rules the heavier clients out. The kubeconfig is
// read with sigs.k8s.io/yaml (a YAML subset parser written here saved its
// 0.2-0.4 ms of package init per invocation, but correctness of a format
// with a maintained library comes first).
package kube

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Config is what a client needs: the server and credentials.
type Config struct {
	Server string
	// CAData is the PEM bundle that signs the server's certificate; empty
	// means the system roots.
	CAData   []byte
	Insecure bool // insecure-skip-tls-verify
	Token    string
	// TokenFile is re-read on every client creation (bound SA tokens rotate).
	TokenFile string
	CertData  []byte // client certificate (PEM)
	KeyData   []byte // client key (PEM)
}

// kubeconfig is the subset of the kubeconfig file format we read.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData string `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Token                 string `json:"token"`
			TokenFile             string `json:"tokenFile"`
			ClientCertificate     string `json:"client-certificate"`
			ClientCertificateData string `json:"client-certificate-data"`
			ClientKey             string `json:"client-key"`
			ClientKeyData         string `json:"client-key-data"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
}

// LoadKubeconfig reads a kubeconfig file: its current context's cluster and
// user. Relative file references are relative to the kubeconfig's directory,
// as in kubectl. Exec and auth-provider plugins are not supported (a CNI
// plugin must not depend on interactive credentials).
func LoadKubeconfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return parseKubeconfig(path, data, os.ReadFile)
}

// parseKubeconfig is LoadKubeconfig of the file path holding data;
// readFile reads the files it names.
func parseKubeconfig(path string, data []byte, readFile func(string) ([]byte, error)) (*Config, error) {
	kc, err := decodeKubeconfig(data)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	ctxName := kc.CurrentContext
	var clusterName, userName string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == ctxName || (ctxName == "" && len(kc.Contexts) == 1) {
			clusterName, userName, found = c.Context.Cluster, c.Context.User, true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeconfig %s: current-context %q not found", path, ctxName)
	}
	dir := filepath.Dir(path)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	cfg := &Config{}
	for _, c := range kc.Clusters {
		if c.Name != clusterName {
			continue
		}
		cfg.Server = c.Cluster.Server
		cfg.Insecure = c.Cluster.InsecureSkipTLSVerify
		if cfg.CAData, err = dataOrFile(c.Cluster.CertificateAuthorityData, rel(c.Cluster.CertificateAuthority), readFile); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: cluster %q: certificate authority: %w", path, clusterName, err)
		}
	}
	if cfg.Server == "" {
		return nil, fmt.Errorf("kubeconfig %s: cluster %q not found or has no server", path, clusterName)
	}
	for _, u := range kc.Users {
		if u.Name != userName {
			continue
		}
		cfg.Token, cfg.TokenFile = u.User.Token, rel(u.User.TokenFile)
		if cfg.CertData, err = dataOrFile(u.User.ClientCertificateData, rel(u.User.ClientCertificate), readFile); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: user %q: client certificate: %w", path, userName, err)
		}
		if cfg.KeyData, err = dataOrFile(u.User.ClientKeyData, rel(u.User.ClientKey), readFile); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: user %q: client key: %w", path, userName, err)
		}
	}
	return cfg, nil
}

// decodeKubeconfig reads the kubeconfig's YAML (or JSON) as kubectl does:
// sigs.k8s.io/yaml to JSON, then sigs.k8s.io/json's case-sensitive
// decoding (client-go ignores "Cluster:" where it wants "cluster:";
// encoding/json would take it, found by FuzzKubeconfig).
func decodeKubeconfig(data []byte) (*kubeconfig, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	var kc kubeconfig
	if err := kjson.UnmarshalCaseSensitivePreserveInts(j, &kc); err != nil {
		return nil, err
	}
	return &kc, nil
}

func dataOrFile(b64, file string, readFile func(string) ([]byte, error)) ([]byte, error) {
	if b64 != "" {
		return base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	}
	if file != "" {
		return readFile(file)
	}
	return nil, nil
}

// In-cluster service account files (what a DaemonSet pod gets).
const (
	saDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// InCluster returns the configuration of a pod's service account, or an
// error when not running in a pod.
func InCluster() (*Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("no kubeconfig configured and not running in a pod (KUBERNETES_SERVICE_HOST/PORT unset)")
	}
	ca, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration: %w", err)
	}
	return &Config{Server: "https://" + net.JoinHostPort(host, port), CAData: ca, TokenFile: filepath.Join(saDir, "token")}, nil
}
