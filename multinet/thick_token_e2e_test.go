package multinet

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/multinet/api"
)

// Token rotation: the daemon authenticates with a service account token
// file — in-cluster (KUBERNETES_SERVICE_HOST/PORT and the service account
// directory, as in a DaemonSet pod) or a kubeconfig's tokenFile. The file
// is replaced by a new token (as the kubelet rotates a projected token:
// a new file renamed into place) and the old token is revoked at once (its
// bound Secret deleted). The next ADD works, and no request was refused:
// the daemon read the new token when the file changed. (client-go alone
// re-reads a token file once a minute and not after a 401, so it would
// have failed here for up to a minute.) The daemon uses only the rights
// README "Thick mode" lists.
func TestThickTokenRotation(t *testing.T) {
	for _, mode := range []string{"in-cluster", "kubeconfig-tokenFile"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			sa := "multinet-daemon"
			daemonRBAC(t, e, sa)
			saDir := filepath.Join(e.dir, "serviceaccount")
			os.MkdirAll(saDir, 0o755)
			os.WriteFile(filepath.Join(saDir, "ca.crt"), e.c.CAPEM, 0o644)
			tokenPath := filepath.Join(saDir, "token")
			tok1 := boundToken(t, e, sa, "bound-1")
			if err := atomicfile.Write(tokenPath, []byte(tok1), 0o600, false); err != nil {
				t.Fatal(err)
			}
			var extra map[string]any
			var env []string
			if mode == "in-cluster" {
				host, port, _ := net.SplitHostPort(e.tlsAddr)
				extra = map[string]any{"kubeconfig": ""}
				env = []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port}
				e.daemonFlags = []string{"-serviceaccount-dir", saDir}
			} else {
				kc := map[string]any{
					"apiVersion": "v1", "kind": "Config", "current-context": "t",
					"clusters": []any{map[string]any{"name": "t", "cluster": map[string]any{"server": "https://" + e.tlsAddr, "certificate-authority": e.c.CAFile}}},
					"users":    []any{map[string]any{"name": "u", "user": map[string]any{"tokenFile": tokenPath}}},
					"contexts": []any{map[string]any{"name": "t", "context": map[string]any{"cluster": "t", "user": "u"}}},
				}
				b, _ := yaml.Marshal(kc)
				path := filepath.Join(e.dir, "kubeconfig-tokenfile")
				os.WriteFile(path, b, 0o600)
				extra = map[string]any{"kubeconfig": path}
			}
			e.nad("", "blue", e.bridgeNAD("", 1, nil))
			d := e.startDaemon(extra, env...)
			p1 := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})
			e.mustAdd(p1)
			if len(statusOf(t, e, p1)) != 2 {
				t.Fatal("no status with the first token")
			}

			// Rotate, then revoke the old token.
			tok2 := boundToken(t, e, sa, "bound-2")
			if err := atomicfile.Write(tokenPath, []byte(tok2), 0o600, false); err != nil {
				t.Fatal(err)
			}
			if err := e.c.Delete("v1", "Secret", e.ns, "bound-1"); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				code, _, _ := e.c.DoAs(tok1, "GET", "/api/v1/namespaces/"+e.ns+"/pods", "", nil)
				if code == 401 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the old token still works (%d) 10 s after its Secret was deleted", code)
				}
				time.Sleep(50 * time.Millisecond)
			}
			p2 := e.pod("p2", map[string]string{api.NetworksAnnotation: "blue"})
			e.mustAdd(p2)
			if len(statusOf(t, e, p2)) != 2 {
				t.Error("no status after the rotation")
			}
			// The informers go on too: a NAD made now is seen.
			e.nad("", "green", e.bridgeNAD("", 2, nil))
			deadline = time.Now().Add(10 * time.Second)
			for d.metric("multinet_object_reads_total", `kind="nad"`, `source="informer"`) == 0 || !nadInInformer(t, e, d, "green") {
				if time.Now().After(deadline) {
					t.Fatalf("the NAD informer does not see a NAD created after the rotation\n%s", d.output())
				}
				time.Sleep(100 * time.Millisecond)
			}
			e.mustDel(p1)
			e.mustDel(p2)
			e.noStatus(p1)
			e.noStatus(p2)
			if v := d.metric("multinet_api_request_errors_total", `code="401"`); v != 0 {
				t.Errorf("%v requests were refused with 401: the rotated token was not picked up at once\n%s", v, d.output())
			}
		})
	}
}

// nadInInformer ADDs and DELs a pod selecting the NAD and reports whether
// its read came from the informer (no API GET).
func nadInInformer(t *testing.T, e *env, d *daemonProc, name string) bool {
	before := d.metric("multinet_object_reads_total", `kind="nad"`, `source="api"`)
	p := e.pod(name+"-probe-"+randHex(2), map[string]string{api.NetworksAnnotation: name})
	e.mustAdd(p)
	e.mustDel(p)
	return d.metric("multinet_object_reads_total", `kind="nad"`, `source="api"`) == before
}

// daemonRBAC gives the service account sa of the env's namespace the
// daemon's rights, and nothing more.
func daemonRBAC(t *testing.T, e *env, sa string) {
	t.Helper()
	if _, err := e.c.Create(map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": sa, "namespace": e.ns}}); err != nil {
		t.Fatal(err)
	}
	role := "multinet-daemon-" + e.ns
	if _, err := e.c.Apply(map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": role},
		"rules": []any{
			map[string]any{"apiGroups": []string{""}, "resources": []string{"pods"}, "verbs": []string{"get", "list", "watch"}},
			map[string]any{"apiGroups": []string{""}, "resources": []string{"pods/status"}, "verbs": []string{"patch"}},
			map[string]any{"apiGroups": []string{"k8s.cni.cncf.io"}, "resources": []string{"network-attachment-definitions"}, "verbs": []string{"get", "list", "watch"}},
			map[string]any{"apiGroups": []string{"", "events.k8s.io"}, "resources": []string{"events"}, "verbs": []string{"create", "patch", "update"}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Apply(map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": map[string]any{"name": role},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": e.ns}},
	}); err != nil {
		t.Fatal(err)
	}
}

// boundToken creates the Secret secret and returns a token of sa bound to
// it: deleting the Secret revokes the token.
func boundToken(t *testing.T, e *env, sa, secret string) string {
	t.Helper()
	out, err := e.c.Create(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": secret, "namespace": e.ns}})
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	json.Unmarshal(out, &s)
	req := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{
		"expirationSeconds": 3600,
		"boundObjectRef":    map[string]any{"apiVersion": "v1", "kind": "Secret", "name": secret, "uid": s.Metadata.UID},
	}}
	code, body, err := e.c.Do("POST", fmt.Sprintf("/api/v1/namespaces/%s/serviceaccounts/%s/token", e.ns, sa), req)
	if err != nil || code != 201 {
		t.Fatalf("TokenRequest: %d %v %s", code, err, body)
	}
	var tr struct {
		Status struct{ Token string } `json:"status"`
	}
	json.Unmarshal(body, &tr)
	if tr.Status.Token == "" {
		t.Fatalf("TokenRequest: no token in %s", body)
	}
	return tr.Status.Token
}
