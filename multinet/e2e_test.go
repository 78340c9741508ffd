package multinet

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/multinet/status"
	"github.com/patchbay-cni/patchbay/spec"
)

func statusOf(t *testing.T, e *env, p *pod) []status.Entry {
	t.Helper()
	v, ok := e.podAnnotations(p)[api.NetworkStatusAnnotation]
	if !ok {
		t.Fatalf("no %s annotation", api.NetworkStatusAnnotation)
	}
	entries, err := status.Decode(v)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func sortedLinks(e *env, p *pod) []string {
	l := e.links(p)
	slices.Sort(l)
	return l
}

// The main path: cluster network from a conflist path, a NAD with
// spec.config and no "name" (injection), a NAD from an on-disk .conf
// (§3.4.1 rule 3), the same NAD twice (§4.2), comma form; interfaces,
// status, API calls per ADD, and a DEL that leaves nothing.
func TestAddDelPod(t *testing.T) {
	e := newEnv(t)
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	e.nad("", "disk", nil) // no spec.config: on-disk .conf named "disk"
	e.writeJSON(filepath.Join(e.confDir, "20-disk.conf"), map[string]any{
		"cniVersion": "0.4.0", "name": "disk", "type": "bridge", "bridge": "mnbr2",
		"ipam": map[string]any{"type": "host-local", "subnet": "10.78.2.0/24", "dataDir": e.ipamDir}})
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue, disk,blue"})
	nads := "/apis/k8s.cni.cncf.io/v1/namespaces/" + e.ns + "/network-attachment-definitions/"
	e.inWatchCache("/api/v1/namespaces/"+e.ns+"/pods/p1", nads+"blue", nads+"disk")

	e.proxy.take()
	res := e.mustAdd(p)
	calls := e.proxy.take()
	// pod GET + one GET per distinct NAD (2) + one status write.
	want := []string{
		"GET /api/v1/namespaces/" + e.ns + "/pods/p1",
		"GET /apis/k8s.cni.cncf.io/v1/namespaces/" + e.ns + "/network-attachment-definitions/blue",
		"GET /apis/k8s.cni.cncf.io/v1/namespaces/" + e.ns + "/network-attachment-definitions/disk",
		"PATCH /api/v1/namespaces/" + e.ns + "/pods/p1/status",
	}
	got := slices.Clone(calls)
	slices.Sort(got[1:3])
	if !slices.Equal(got, want) {
		t.Errorf("API calls per ADD:\n got %q\nwant %q", calls, want)
	}
	t.Logf("API calls per ADD: %d", len(calls))

	// The runtime gets the cluster network's result.
	if len(res.IPs) != 1 || !strings.HasPrefix(res.IPs[0].Address.String(), "10.77.0.") {
		t.Errorf("ADD result is not the cluster network's: %v", res)
	}
	if l := sortedLinks(e, p); !slices.Equal(l, []string{"eth0", "net1", "net2", "net3"}) {
		t.Errorf("pod interfaces = %v", l)
	}
	st := statusOf(t, e, p)
	wantNames := []string{"kube-system/cluster", e.ns + "/blue", e.ns + "/disk", e.ns + "/blue"}
	wantIf := []string{"eth0", "net1", "net2", "net3"}
	wantNet := []string{"10.77.0.", "10.78.1.", "10.78.2.", "10.78.1."}
	if len(st) != 4 {
		t.Fatalf("status has %d entries: %+v", len(st), st)
	}
	for i, s := range st {
		// Bare addresses, as Multus writes them (§5.3.3 "addresses").
		if s.Name != wantNames[i] || s.Interface != wantIf[i] || s.Default != (i == 0) || s.Mac == "" ||
			len(s.IPs) != 1 || !strings.HasPrefix(s.IPs[0], wantNet[i]) || strings.Contains(s.IPs[0], "/") {
			t.Errorf("status[%d] = %+v; want name %s interface %s default %v ip in %s", i, s, wantNames[i], wantIf[i], i == 0, wantNet[i])
		}
	}
	if !slices.Equal(st[0].DefaultRoute, []string{"10.77.0.1"}) {
		t.Errorf("default network default-route = %v, want [10.77.0.1]", st[0].DefaultRoute)
	}
	if st[1].IPs[0] == st[3].IPs[0] {
		t.Errorf("the same network twice got the same address %s", st[1].IPs[0])
	}
	if len(e.leases()) != 4 {
		t.Errorf("leases after ADD = %v, want 4", e.leases())
	}

	if err := e.check(p); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	e.proxy.take()
	e.mustDel(p)
	// DEL removes the status it wrote: one conditional PATCH.
	if calls := e.proxy.take(); !slices.Equal(calls, []string{"PATCH /api/v1/namespaces/" + e.ns + "/pods/p1/status"}) {
		t.Errorf("API calls of DEL = %q, want the status PATCH only", calls)
	}
	if v, ok := e.podAnnotations(p)[api.NetworkStatusAnnotation]; ok {
		t.Errorf("network status left after DEL: %s", v)
	}
	if l := e.links(p); len(l) != 0 {
		t.Errorf("interfaces left after DEL: %v", l)
	}
	if l := e.leases(); len(l) != 0 {
		t.Errorf("addresses left after DEL (the cluster network is a conflist path): %v", l)
	}
	if _, err := os.Stat(filepath.Join(e.cniDir, p.cid+".json")); !os.IsNotExist(err) {
		t.Errorf("cache file left after DEL: %v", err)
	}
	// DEL is idempotent (and, with nothing left, makes no API call).
	e.mustDel(p)
	if calls := e.proxy.take(); len(calls) != 0 {
		t.Errorf("second DEL made API calls: %q", calls)
	}
}

// DEL removes only the network status its own ADD wrote: a status written
// since (another sandbox of the pod) is left alone.
func TestDelKeepsANewerStatus(t *testing.T) {
	e := newEnv(t)
	p := e.pod("p1", nil)
	e.mustAdd(p)
	newer := `[{"name":"kube-system/cluster","interface":"eth0","ips":["10.77.0.99"],"default":true}]`
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{api.NetworkStatusAnnotation: newer}}}
	if code, body, err := e.c.DoAs(e.c.Token, "PATCH", "/api/v1/namespaces/"+e.ns+"/pods/p1/status", "application/merge-patch+json", patch); err != nil || code != 200 {
		t.Fatalf("PATCH: %d %v %s", code, err, body)
	}
	e.mustDel(p)
	if v := e.podAnnotations(p)[api.NetworkStatusAnnotation]; v != newer {
		t.Errorf("DEL changed a status it did not write: %q", v)
	}
}

// Invalid-and-ignored annotation (§4.1.2.1.4): the pod gets the cluster
// network only, plus a Warning event and a log line naming the problem.
// The event is recorded once per problem: a second sandbox of the same pod
// (or the kubelet retrying ADD) adds no second event. Its source host is
// the pod's node as the kubelet names it (spec.nodeName, which follows
// --hostname-override), not the machine's hostname.
func TestIgnoredAnnotationEvent(t *testing.T) {
	e := newEnv(t)
	e.nodeName = "node-" + randHex(4) // never this machine's hostname
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: `[{"name":"blue","mac":"not-a-mac"}]`})
	e.mustAdd(p)
	e.mustDel(p)
	e.mustAdd(p)
	if l := e.links(p); !slices.Equal(l, []string{"eth0"}) {
		t.Errorf("pod interfaces = %v, want only eth0", l)
	}
	_, body, err := e.c.Do("GET", "/api/v1/namespaces/"+e.ns+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	var evs struct {
		Items []struct {
			Type, Reason, Message string
			InvolvedObject        struct{ Name, Kind string }
			Source                struct{ Component, Host string }
			ReportingInstance     string
		}
	}
	json.Unmarshal(body, &evs)
	found := 0
	for _, ev := range evs.Items {
		if ev.Type == "Warning" && ev.InvolvedObject.Name == "p1" && strings.Contains(ev.Message, `"mac"`) && strings.Contains(ev.Message, "not-a-mac") {
			found++
			t.Logf("event %s from %s on %s: %s", ev.Reason, ev.Source.Component, ev.Source.Host, ev.Message)
			if ev.Source.Host != e.nodeName || ev.ReportingInstance != e.nodeName {
				t.Errorf("event source host %q, reportingInstance %q; want the pod's node %q", ev.Source.Host, ev.ReportingInstance, e.nodeName)
			}
		}
	}
	if found != 1 {
		t.Errorf("%d Warning events naming the bad mac after two ADDs, want exactly 1: %s", found, body)
	}
	if !strings.Contains(e.log(), "not-a-mac") {
		t.Errorf("no log line naming the problem:\n%s", e.log())
	}
	if st := statusOf(t, e, p); len(st) != 1 || !st[0].Default {
		t.Errorf("status = %+v", st)
	}
	e.mustDel(p)
}

// §7.4: with namespaceIsolation a pod may not use another namespace's NAD
// unless that namespace is global; denial fails ADD with nothing attached.
func TestNamespaceIsolation(t *testing.T) {
	e := newEnv(t)
	other := e.c.UniqueNamespace(t, "mno")
	e.nad(other, "shared", e.bridgeNAD("", 1, nil))
	e.opts["namespaceIsolation"] = true
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: other + "/shared"})
	_, err := e.add(p)
	if err == nil || !strings.Contains(err.Error(), "namespace isolation") {
		t.Fatalf("ADD = %v, want a namespace isolation error", err)
	}
	e.nothingLeft(p, "left after the denied ADD")
	e.mustDel(p)
	e.opts["globalNamespaces"] = "x," + other
	e.mustAdd(p)
	if l := sortedLinks(e, p); !slices.Equal(l, []string{"eth0", "net1"}) {
		t.Errorf("pod interfaces = %v", l)
	}
	e.mustDel(p)

	// Without globalNamespaces, "default" is global (Multus's default, so
	// a Multus configuration keeps its meaning).
	delete(e.opts, "globalNamespaces")
	shared := "mn-shared-" + randHex(3)
	e.nad("default", shared, e.bridgeNAD("", 2, nil))
	t.Cleanup(func() { e.c.Delete(api.APIVersion(api.NADVersion), api.NADKind, "default", shared) })
	p2 := e.pod("p2", map[string]string{api.NetworksAnnotation: "default/" + shared})
	e.mustAdd(p2)
	e.mustDel(p2)

	// The pod's own default network (Multus's annotation) names a NAD of
	// multusNamespace, a bare name included, which isolation allows.
	sys := e.c.UniqueNamespace(t, "mnsys")
	e.opts["multusNamespace"] = sys
	e.nad(sys, "alt", e.bridgeNAD("", 7, nil))
	p3 := e.pod("p3", map[string]string{api.DefaultNetworkAnnotation: "alt"})
	e.mustAdd(p3)
	if st := statusOf(t, e, p3); len(st) != 1 || st[0].Name != sys+"/alt" || !st[0].Default {
		t.Errorf("status = %+v, want %s/alt as the default network", st, sys)
	}
	e.mustDel(p3)
	if l := e.leases(); len(l) != 0 {
		t.Errorf("leases left: %v", l)
	}
}

// §7.2: the second selected network fails; the first and the cluster
// network are deleted, the third is never attempted, one error results.
func TestFailureRollsBack(t *testing.T) {
	e := newEnv(t)
	e.nad("", "good", e.bridgeNAD("", 1, nil))
	bad := e.bridgeNAD("", 2, nil)
	// tuning fails ADD (no such sysctl) but DELs fine, as a real failure would.
	bad["plugins"] = append(bad["plugins"].([]any), map[string]any{"type": "tuning", "sysctl": map[string]string{"net.ipv4.conf.IFNAME.no_such_knob": "1"}})
	e.nad("", "bad", bad)
	e.nad("", "never", e.bridgeNAD("", 3, nil))
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "good,bad,never"})
	_, err := e.add(p)
	if err == nil {
		t.Fatal("ADD succeeded")
	}
	msg := err.Error()
	t.Logf("ADD error: %v", msg)
	if !strings.Contains(msg, "no_such_knob") || strings.Contains(msg, "DEL(s) failed") || !strings.Contains(msg, "3 attempted attachment(s) were deleted") {
		t.Errorf("error does not name the failure and the rollback: %v", msg)
	}
	if l := e.links(p); len(l) != 0 {
		t.Errorf("interfaces left: %v", l)
	}
	if l := e.leases(); len(l) != 0 {
		t.Errorf("addresses left: %v", l)
	}
	if out, _ := testutil.InNS(t, e.hostNS, "ip", "link", "show", "mnbr3"); !strings.Contains(out, "does not exist") {
		t.Errorf("the network after the failure was attempted (bridge mnbr3 exists): %s", out)
	}
	e.mustDel(p)
}

// DEL works from the cache after the pod and a NAD are deleted.
func TestDelAfterPodAndNADDeleted(t *testing.T) {
	e := newEnv(t)
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})
	e.mustAdd(p)
	if err := e.c.Delete(api.APIVersion(api.NADVersion), api.NADKind, e.ns, "blue"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete("v1", "Pod", e.ns, "p1"); err != nil {
		t.Fatal(err)
	}
	e.mustDel(p)
	e.nothingLeft(p, "left after DEL")
}

// A truncated cache file never wedges DEL: it succeeds and still removes
// what the delegates' result cache knows.
func TestCorruptCacheDel(t *testing.T) {
	e := newEnv(t)
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})
	e.mustAdd(p)
	f := filepath.Join(e.cniDir, p.cid+".json")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, b[:len(b)/3], 0o600); err != nil {
		t.Fatal(err)
	}
	e.mustDel(p)
	e.nothingLeft(p, "left after DEL with a corrupt cache")
	if !strings.Contains(e.log(), "cache is unusable") {
		t.Errorf("corrupt cache not logged:\n%s", e.log())
	}
}

// CHECK, GC and STATUS go through every delegate, annotation networks
// included.
func TestCheckGCStatus(t *testing.T) {
	e := newEnv(t)
	blue := e.bridgeNAD("", 1, nil)
	blue["cniVersion"] = "1.1.0"
	blue["plugins"] = append(blue["plugins"].([]any), map[string]any{"type": "tuning"})
	e.nad("", "blue", blue)
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})
	e.mustAdd(p)
	if err := e.check(p); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	// Break the annotation network: CHECK must see it.
	if out, err := testutil.InNS(t, p.nsName, "ip", "addr", "flush", "dev", "net1"); err != nil {
		t.Fatal(err, out)
	}
	err := e.check(p)
	if err == nil || !strings.Contains(err.Error(), e.ns+"/blue") {
		t.Errorf("CHECK after breaking net1 = %v, want an error naming %s/blue", err, e.ns)
	}
	status := func() error {
		return e.inHost(func() error { return e.cni.StatusNetworkList(t.Context(), e.conf()) })
	}
	if err := status(); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	// STATUS reaches the annotation network's plugins: without its tuning
	// plugin (only "blue" uses it) STATUS fails naming it.
	os.Remove(filepath.Join(e.binDir, "tuning"))
	if err := status(); err == nil || !strings.Contains(err.Error(), "tuning") {
		t.Errorf("STATUS without blue's tuning plugin = %v, want an error naming tuning", err)
	}
	os.Symlink(filepath.Join(testutil.OurBin(t), "tuning"), filepath.Join(e.binDir, "tuning"))
	e.opts["readinessindicatorfile"] = filepath.Join(e.dir, "not-there")
	e.opts["readinessTimeoutSeconds"] = 1
	if ce := spec.AsError(status(), 0); ce == nil || ce.Code != spec.ErrPluginNotAvailable {
		t.Errorf("STATUS without the readiness file = %v, want code 50", ce)
	}
	delete(e.opts, "readinessindicatorfile")

	// GC with no valid attachment removes the pod's every attachment. The
	// runtime here has an empty cache, so only multinet's own GC acts.
	gc := *e.cni
	gc.CacheDir = t.TempDir()
	if err := e.inHost(func() error { return gc.GCNetworkList(t.Context(), e.conf(), []spec.Attachment{}) }); err != nil {
		t.Errorf("GC: %v", err)
	}
	e.nothingLeft(p, "left after GC")
}

// asyncNetworkStatus: the annotation is written by a detached process
// shortly after ADD returns.
func TestAsyncNetworkStatus(t *testing.T) {
	e := newEnv(t)
	e.opts["asyncNetworkStatus"] = true
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})
	e.mustAdd(p)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, ok := e.podAnnotations(p)[api.NetworkStatusAnnotation]; ok {
			st, err := status.Decode(v)
			if err != nil || len(st) != 2 || st[1].Interface != "net1" {
				t.Errorf("status = %s (%v)", v, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no network status after 5s\n%s", e.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.mustDel(p)
}

// asyncNetworkStatus and a DEL right after ADD: the detached writer's
// status (delayed here past the DEL) is not written for the deleted
// sandbox.
func TestAsyncNetworkStatusAfterDel(t *testing.T) {
	e := newEnv(t)
	e.opts["asyncNetworkStatus"] = true
	e.proxy.slowStatusWrite.Store(int64(400 * time.Millisecond))
	p := e.pod("p1", nil)
	e.mustAdd(p)
	e.mustDel(p)
	time.Sleep(1500 * time.Millisecond)
	e.noStatus(p)
}

// §7.3: operations on one container are serialized (ADD and DEL racing end
// clean after a final DEL); different containers proceed in parallel.
func TestConcurrentOperations(t *testing.T) {
	e := newEnv(t)
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	var pods []*pod
	for _, n := range []string{"p1", "p2", "p3"} {
		pods = append(pods, e.pod(n, map[string]string{api.NetworksAnnotation: "blue"}))
	}
	errs := make(chan error, 2*len(pods))
	for _, p := range pods {
		go func() { _, err := e.add(p); errs <- err }()
		go func() { time.Sleep(5 * time.Millisecond); errs <- e.del(p) }()
	}
	for range 2 * len(pods) {
		if err := <-errs; err != nil {
			t.Errorf("concurrent operation: %v", err)
		}
	}
	for _, p := range pods {
		e.mustDel(p)
		if l := e.links(p); len(l) != 0 {
			t.Errorf("%s: interfaces left: %v", p.name, l)
		}
	}
	if l := e.leases(); len(l) != 0 {
		t.Errorf("leases left: %v", l)
	}
}
