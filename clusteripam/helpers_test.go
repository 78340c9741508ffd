package clusteripam

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/kubetest"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/multinet/kube"
	"github.com/patchbay-cni/patchbay/spec"
)

func TestMain(m *testing.M) { testutil.Isolate(); kubetest.Main(m) }

// installCRDs applies every file of deploy/crds, as `kubectl apply -f
// deploy/crds/` would.
func installCRDs(t testing.TB, c *kubetest.Cluster) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("..", "deploy", "crds", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no CRDs in deploy/crds")
	}
	if err := c.InstallCRDs(files...); err != nil {
		t.Fatal(err)
	}
}

// apiClient is our thin client on the test cluster (admin token).
func apiClient(t testing.TB, c *kubetest.Cluster) *kube.Client {
	t.Helper()
	cl, err := kube.New(&kube.Config{Server: c.URL, CAData: c.CAPEM, Token: c.Token}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// world is one test's view: the shared cluster, a client, and a
// network_name of its own, so its pools are its own.
type world struct {
	t   testing.TB
	c   *kubetest.Cluster
	api *kube.Client
	al  *Allocator
	net string // network_name
	ns  string // Kubernetes namespace (pods, claims)
}

func newWorld(t testing.TB) *world {
	t.Helper()
	c := kubetest.Shared(t)
	installCRDs(t, c)
	api := apiClient(t, c)
	w := &world{t: t, c: c, api: api, al: &Allocator{Client: api, RetryFor: 5 * time.Second}, net: "t-" + randHex(4)}
	w.ns = c.UniqueNamespace(t, "cipam")
	return w
}

// config parses an ipam dictionary for network "net" with the world's
// network_name.
func (w *world) config(ipam map[string]any, args string, extra map[string]any) *Config {
	w.t.Helper()
	ipam["type"] = Type
	ipam["network_name"] = w.net
	n := map[string]any{"cniVersion": "1.1.0", "name": "net", "ipam": ipam}
	for k, v := range extra {
		n[k] = v
	}
	b, _ := json.Marshal(n)
	c, err := ParseConfig(b, args, files{}.read)
	if err != nil {
		w.t.Fatalf("config: %v", err)
	}
	return c
}

func attachment(node string) Attachment {
	return Attachment{Network: "net", ContainerID: randHex(32), IfName: "net1", Node: node}
}

// allocations lists the world's allocations (quorum read).
func (w *world) allocations() []*Allocation {
	w.t.Helper()
	all, err := w.al.store().list(context.Background(), "", false)
	if err != nil {
		w.t.Fatal(err)
	}
	var out []*Allocation
	for _, a := range all {
		if a.Spec.NetworkName == w.net {
			out = append(out, a)
		}
	}
	return out
}

func (w *world) wantAllocations(n int, when string) []*Allocation {
	w.t.Helper()
	got := w.allocations()
	if len(got) != n {
		var s []string
		for _, a := range got {
			s = append(s, a.Spec.Address+" "+a.holder())
		}
		w.t.Fatalf("%s: %d allocations, want %d: %v", when, len(got), n, s)
	}
	return got
}

func result(as []Assigned) *spec.Result {
	r := &spec.Result{CNIVersion: spec.Current}
	for _, a := range as {
		r.IPs = append(r.IPs, &spec.IPConfig{Address: a.Address, Gateway: a.Gateway})
	}
	return r
}

func addrs(as []Assigned) []netip.Addr {
	var out []netip.Addr
	for _, a := range as {
		out = append(out, a.Address.Addr())
	}
	return out
}

// pod creates a Pod object and returns its reference.
func (w *world) pod(name string) PodRef {
	w.t.Helper()
	out, err := w.c.Create(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": w.ns},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}})
	if err != nil {
		w.t.Fatal(err)
	}
	var m struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	json.Unmarshal(out, &m)
	return PodRef{Namespace: w.ns, Name: name, UID: m.Metadata.UID}
}

// deletePod removes a pod object at once (as after its node died and
// the pod was force-deleted).
func (w *world) deletePod(p PodRef) {
	w.t.Helper()
	if _, _, err := w.c.Do("DELETE", "/api/v1/namespaces/"+p.Namespace+"/pods/"+p.Name+"?gracePeriodSeconds=0", nil); err != nil {
		w.t.Fatal(err)
	}
}
