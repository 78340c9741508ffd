package kubetest_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/kubetest"
	"github.com/patchbay-cni/patchbay/internal/launch"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(ownerEnv); dir != "" {
		ownerHelper(dir) // never returns
	}
	kubetest.Main(m)
}

// decode unmarshals JSON into a generic map, failing the test on error.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode %.200s: %v", b, err)
	}
	return m
}

// field walks nested maps: field(obj, "spec", "size").
func field(obj map[string]any, keys ...string) any {
	var v any = obj
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func TestAuthenticationAndTLS(t *testing.T) {
	c := kubetest.Shared(t)
	if status, _, err := c.Do("GET", "/api/v1/namespaces", nil); err != nil || status != 200 {
		t.Fatalf("admin list namespaces: %d %v", status, err)
	}
	// RBAC is real: the plain user may not list namespaces, a bad token is
	// not authenticated at all.
	if status, _, err := c.DoAs(c.UserToken, "GET", "/api/v1/namespaces", "", nil); status != 403 {
		t.Errorf("plain user list namespaces: got %d %v, want 403", status, err)
	}
	if status, _, err := c.DoAs("not-a-token", "GET", "/api/v1/namespaces", "", nil); status != 401 {
		t.Errorf("bad token: got %d %v, want 401", status, err)
	}
	// The serving certificate is signed by the cluster's own CA only.
	_, err := http.Get(c.URL + "/version")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("default client against the apiserver: got %v, want a certificate error", err)
	}
	_, body, err := c.Do("GET", "/version", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := decode(t, body)["gitVersion"]; v != kubetest.Version {
		t.Errorf("gitVersion %v, want %s", v, kubetest.Version)
	}
}

func TestKubeconfig(t *testing.T) {
	c := kubetest.Shared(t)
	b, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"server: " + c.URL, "token: " + c.Token, "certificate-authority-data: " + base64.StdEncoding.EncodeToString(c.CAPEM)} {
		if !strings.Contains(s, want) {
			t.Errorf("kubeconfig lacks %q:\n%s", want, s)
		}
	}
}

func TestNamespaceAndServiceAccount(t *testing.T) {
	c := kubetest.Shared(t)
	for i := 0; i < 2; i++ { // both helpers are idempotent
		if err := c.EnsureNamespace("kubetest-ns"); err != nil {
			t.Fatal(err)
		}
		if err := c.CreateDefaultServiceAccount("kubetest-ns"); err != nil {
			t.Fatal(err)
		}
	}
	sa, err := c.Get("v1", "ServiceAccount", "kubetest-ns", "default")
	if err != nil {
		t.Fatal(err)
	}
	if got := field(decode(t, sa), "metadata", "namespace"); got != "kubetest-ns" {
		t.Errorf("service account namespace %v", got)
	}
}

func TestCustomResource(t *testing.T) {
	c := kubetest.Shared(t)
	crd, err := os.ReadFile("testdata/widget-crd.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(crd); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.WaitCRDEstablished("widgets.kubetest.patchbay.dev", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("CRD established and discoverable in %v", time.Since(start).Round(time.Millisecond))

	ns := c.UniqueNamespace(t, "crd")
	obj := `{"apiVersion":"kubetest.patchbay.dev/v1","kind":"Widget",
		"metadata":{"name":"w1","namespace":"` + ns + `"},"spec":{"size":3,"color":"red"}}`
	if _, err := c.Create(obj); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get("kubetest.patchbay.dev/v1", "Widget", ns, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if size := field(decode(t, got), "spec", "size"); size != 3.0 {
		t.Errorf("spec.size = %v, want 3", size)
	}

	// The schema is enforced.
	bad := strings.Replace(obj, `"size":3`, `"size":0`, 1)
	bad = strings.Replace(bad, `"w1"`, `"w2"`, 1)
	if _, err := c.Create(bad); !kubetest.IsStatus(err, 422) {
		t.Errorf("widget with size 0: got %v, want 422", err)
	}

	// Server-side apply updates it; the status subresource is separate.
	applied, err := c.Apply(strings.Replace(obj, `"red"`, `"blue"`, 1))
	if err != nil {
		t.Fatal(err)
	}
	if color := field(decode(t, applied), "spec", "color"); color != "blue" {
		t.Errorf("after apply spec.color = %v", color)
	}
	path, err := c.ObjectPath("kubetest.patchbay.dev/v1", "Widget", ns, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Do("PATCH", path+"/status", `{"status":{"ready":true}}`); err != nil {
		t.Fatal(err)
	}
	got, _ = c.Get("kubetest.patchbay.dev/v1", "Widget", ns, "w1")
	if ready := field(decode(t, got), "status", "ready"); ready != true {
		t.Errorf("status.ready = %v", ready)
	}
}

func TestPod(t *testing.T) {
	c := kubetest.Shared(t)

	// Without its default ServiceAccount a namespace takes no Pod.
	bare := "kubetest-nosa"
	if err := c.EnsureNamespace(bare); err != nil {
		t.Fatal(err)
	}
	pod := func(ns string) string {
		return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1","namespace":"` + ns + `"},
			"spec":{"containers":[{"name":"main","image":"busybox"}]}}`
	}
	if _, err := c.Create(pod(bare)); err == nil || !strings.Contains(err.Error(), "serviceaccount") {
		t.Errorf("pod without default service account: got %v, want a serviceaccount error", err)
	}

	ns := c.UniqueNamespace(t, "pod")
	created, err := c.Create(pod(ns))
	if err != nil {
		t.Fatal(err)
	}
	if uid := field(decode(t, created), "metadata", "uid"); uid == nil || uid == "" {
		t.Errorf("created pod has no uid: %s", created)
	}
	path, err := c.ObjectPath("v1", "Pod", ns, "p1")
	if err != nil {
		t.Fatal(err)
	}

	// Merge-patch the annotations (as a CNI plugin records what it did).
	patch := `{"metadata":{"annotations":{"patchbay.dev/network-status":"[{\"name\":\"net1\"}]"}}}`
	if _, _, err := c.Do("PATCH", path, patch); err != nil {
		t.Fatal(err)
	}

	// Update the status subresource with a full object (PUT, optimistic
	// concurrency on resourceVersion).
	_, body, err := c.Do("GET", path, nil)
	if err != nil {
		t.Fatal(err)
	}
	obj := decode(t, body)
	obj["status"] = map[string]any{
		"phase":  "Running",
		"podIP":  "192.0.2.10", // documentation range: a stored value, never a target
		"podIPs": []any{map[string]any{"ip": "192.0.2.10"}},
	}
	if _, _, err := c.Do("PUT", path+"/status", obj); err != nil {
		t.Fatal(err)
	}
	// A stale resourceVersion is refused.
	if _, _, err := c.Do("PUT", path+"/status", obj); !kubetest.IsStatus(err, 409) {
		t.Errorf("status update with stale resourceVersion: got %v, want 409", err)
	}

	got, err := c.Get("v1", "Pod", ns, "p1")
	if err != nil {
		t.Fatal(err)
	}
	g := decode(t, got)
	if a := field(g, "metadata", "annotations", "patchbay.dev/network-status"); a != `[{"name":"net1"}]` {
		t.Errorf("annotation = %v", a)
	}
	if ip := field(g, "status", "podIP"); ip != "192.0.2.10" {
		t.Errorf("status.podIP = %v", ip)
	}
	if img := field(g, "spec", "containers").([]any)[0].(map[string]any)["image"]; img != "busybox" {
		t.Errorf("image = %v", img)
	}
}

// A cluster of its own runs inside its own network namespace and is
// stopped with the test: no process, namespace or relay is left, also after
// an apiserver restart. The restarted apiserver is in the same namespace,
// keeps its address and etcd's data, and Relay reaches it again.
func TestStartStopLeavesNothing(t *testing.T) {
	var id clusterID
	var userRelay string
	t.Run("cluster", func(t *testing.T) {
		c := kubetest.Start(t)
		id = identify(t, c)
		checkIsolated(t, c, id.NetnsInode)
		if _, _, err := c.Do("GET", "/readyz", nil); err != nil {
			t.Fatal(err)
		}
		if err := c.EnsureNamespace("kept"); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		userRelay = ln.Addr().String()
		conns := c.Relay(ln)
		relayed := func() error {
			req, _ := http.NewRequest("GET", "https://"+ln.Addr().String()+"/readyz", nil)
			req.Header.Set("Authorization", "Bearer "+c.Token)
			resp, err := c.Client.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
		if err := relayed(); err != nil {
			t.Fatalf("through the relay: %v", err)
		}
		old := c.PIDs()[1]
		oldStart := launch.StartTime(old)
		if err := c.RestartAPIServer(200 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if pid := c.PIDs()[1]; pid == old || launch.StartTime(old) == oldStart {
			t.Errorf("apiserver pid %d after restart, old %d still running", pid, old)
		}
		restarted := identify(t, c)
		id.Procs = append(id.Procs, restarted.Procs[1])
		checkIsolated(t, c, id.NetnsInode)
		if _, err := c.Get("v1", "Namespace", "", "kept"); err != nil {
			t.Errorf("namespace lost across the restart: %v", err)
		}
		c.Client.CloseIdleConnections()
		if err := relayed(); err != nil || conns.Load() < 2 {
			t.Errorf("through the relay after the restart: %v (%d connections)", err, conns.Load())
		}
	})
	if len(id.Procs) != 3 {
		t.Fatalf("processes %v", id.Procs)
	}
	id.Relays = append(id.Relays, userRelay)
	checkGone(t, id, 5*time.Second)
}
