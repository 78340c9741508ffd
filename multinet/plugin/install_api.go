package plugin

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/kube"
)

// InstallAPI is what `multinet install` asks the apiserver, as the
// DaemonSet pod's service account: the node's container runtime, a token
// for the thin plugin, and whether its DaemonSet still exists. Three calls,
// so plain net/http: bin/multinet is also the per-pod thin plugin, and
// linking client-go costs every pod's ADD ~10 ms of start-up (measured,
// multinet/kube's doc).
type InstallAPI struct {
	Server    string // https://host:port
	Namespace string // the service account's namespace
	// ServiceAccount is the pod's service account name (downward API
	// spec.serviceAccountName); the thin plugin's token is requested for it.
	ServiceAccount string
	CA             []byte
	tokenFile      string
	http           *http.Client
}

// ServiceAccountDir is where a pod finds its service account's credentials.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// InClusterAPI is the pod's service account (kube.InCluster: the
// KUBERNETES_SERVICE_HOST/PORT environment and ServiceAccountDir).
func InClusterAPI(serviceAccount string) (*InstallAPI, error) {
	cfg, err := kube.InCluster()
	if err != nil {
		return nil, err
	}
	ns, err := os.ReadFile(filepath.Join(ServiceAccountDir, "namespace"))
	if err != nil {
		return nil, fmt.Errorf("service account: %w", err)
	}
	return NewInstallAPI(cfg.Server, strings.TrimSpace(string(ns)), serviceAccount, cfg.CAData, cfg.TokenFile)
}

// NewInstallAPI is a client of server trusting ca, authenticating with the
// token in tokenFile (re-read on every request: projected tokens rotate).
func NewInstallAPI(server, namespace, serviceAccount string, ca []byte, tokenFile string) (*InstallAPI, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("service account ca.crt holds no PEM certificate")
	}
	return &InstallAPI{
		Server: strings.TrimRight(server, "/"), Namespace: namespace, ServiceAccount: serviceAccount, CA: ca, tokenFile: tokenFile,
		http: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true},
		},
	}, nil
}

// APIError is a non-2xx answer of the apiserver.
type APIError struct {
	Method, Path string
	Code         int
	Message      string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Code, e.Message)
}

func apiCode(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}

func (a *InstallAPI) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.Server+path, rd)
	if err != nil {
		return err
	}
	tok, err := os.ReadFile(a.tokenFile)
	if err != nil {
		return fmt.Errorf("service account token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "multinet-install")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var st struct{ Message string }
		json.Unmarshal(b, &st)
		if st.Message == "" {
			st.Message = strings.TrimSpace(string(b))
		}
		return &APIError{Method: method, Path: path, Code: resp.StatusCode, Message: st.Message}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// NodeRuntime returns the node's UID and container runtime as kubelet
// reports it (status.nodeInfo.containerRuntimeVersion, e.g.
// "containerd://1.6.20").
func (a *InstallAPI) NodeRuntime(ctx context.Context, node string) (uid, runtime string, err error) {
	var n struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
		Status struct {
			NodeInfo struct {
				ContainerRuntimeVersion string `json:"containerRuntimeVersion"`
			} `json:"nodeInfo"`
		} `json:"status"`
	}
	if err := a.do(ctx, http.MethodGet, "/api/v1/nodes/"+url.PathEscape(node), nil, &n); err != nil {
		return "", "", err
	}
	return n.Metadata.UID, n.Status.NodeInfo.ContainerRuntimeVersion, nil
}

// NodeToken requests a token of the service account bound to the node
// (TokenRequest with a Node boundObjectRef, Kubernetes ≥ 1.31 by
// default): unlike the pod's own projected token it stays valid when the
// DaemonSet pod is deleted — during an upgrade, or while no multinet pod
// runs — so the thin plugin keeps working until the token expires.
func (a *InstallAPI) NodeToken(ctx context.Context, node, nodeUID string, lifetime time.Duration) (token string, expires time.Time, err error) {
	req := map[string]any{
		"apiVersion": "authentication.k8s.io/v1",
		"kind":       "TokenRequest",
		"spec": map[string]any{
			"expirationSeconds": int64(lifetime / time.Second),
			"boundObjectRef":    map[string]any{"apiVersion": "v1", "kind": "Node", "name": node, "uid": nodeUID},
		},
	}
	var tr struct {
		Status struct {
			Token               string    `json:"token"`
			ExpirationTimestamp time.Time `json:"expirationTimestamp"`
		} `json:"status"`
	}
	path := "/api/v1/namespaces/" + url.PathEscape(a.Namespace) + "/serviceaccounts/" + url.PathEscape(a.ServiceAccount) + "/token"
	if err := a.do(ctx, http.MethodPost, path, req, &tr); err != nil {
		return "", time.Time{}, err
	}
	if tr.Status.Token == "" {
		return "", time.Time{}, fmt.Errorf("POST %s: no token in the answer", path)
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp, nil
}

// DaemonSetGone reports whether the DaemonSet namespace/name is deleted or
// being deleted, which tells an uninstall from a restart or an upgrade
// (where the DaemonSet stays). A 401 or 403 also counts as gone: our
// service account or its role binding was deleted, which happens only when
// the manifests are being removed.
func (a *InstallAPI) DaemonSetGone(ctx context.Context, namespace, name string) (bool, string, error) {
	var ds struct {
		Metadata struct {
			DeletionTimestamp *time.Time `json:"deletionTimestamp"`
		} `json:"metadata"`
	}
	err := a.do(ctx, http.MethodGet, "/apis/apps/v1/namespaces/"+url.PathEscape(namespace)+"/daemonsets/"+url.PathEscape(name), nil, &ds)
	switch code := apiCode(err); {
	case code == http.StatusNotFound:
		return true, "DaemonSet " + namespace + "/" + name + " is deleted", nil
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return true, "our credentials were revoked (" + err.Error() + ")", nil
	case err != nil:
		return false, "", err
	case ds.Metadata.DeletionTimestamp != nil:
		return true, "DaemonSet " + namespace + "/" + name + " is being deleted", nil
	}
	return false, "DaemonSet " + namespace + "/" + name + " exists (a restart or an upgrade)", nil
}
