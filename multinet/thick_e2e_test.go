package multinet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/spec"
)

// Thick mode end to end: the runtime executes multinet-shim, which hands
// the call to "multinet daemon"; ADD, CHECK, STATUS, GC and DEL through
// every delegate; the informers serve the reads (no pod or NAD GET), the
// status is written and removed; metrics, /healthz and /readyz.
func TestThickAddCheckStatusGCDel(t *testing.T) {
	e := newEnv(t)
	e.nodeName = "node-" + randHex(3)
	blue := e.bridgeNAD("", 1, nil)
	blue["plugins"] = append(blue["plugins"].([]any), map[string]any{"type": "tuning"})
	e.nad("", "blue", blue)
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})
	d := e.startDaemon(nil)

	res := e.mustAdd(p)
	// The pod and the NAD come from the informers: the status write is
	// the only request of the ADD (the informers' own aside).
	for _, r := range []string{"pods", "network-attachment-definitions"} {
		if v := d.metric("multinet_api_request_duration_seconds_count", `method="GET"`, `resource="`+r+`"`); v != 0 {
			t.Errorf("%v GETs of %s, want none", v, r)
		}
	}
	if v := d.metric("multinet_api_request_duration_seconds_count", `method="PATCH"`, `resource="pods/status"`); v != 1 {
		t.Errorf("%v status PATCHes, want 1", v)
	}
	if len(res.IPs) != 1 || !strings.HasPrefix(res.IPs[0].Address.String(), "10.77.0.") {
		t.Errorf("ADD result is not the cluster network's: %v", res)
	}
	if l := sortedLinks(e, p); !slices.Equal(l, []string{"eth0", "net1"}) {
		t.Errorf("pod interfaces = %v", l)
	}
	st := statusOf(t, e, p)
	if len(st) != 2 || st[0].Name != "kube-system/cluster" || st[1].Name != e.ns+"/blue" || !strings.HasPrefix(st[1].IPs[0], "10.78.1.") {
		t.Errorf("status = %+v", st)
	}
	if err := e.check(p); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := e.inHost(func() error { return e.cni.StatusNetworkList(t.Context(), e.conf()) }); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	// GC with the pod valid keeps it; the verb lines are the thin plugin's.
	valid := []spec.Attachment{{ContainerID: p.cid, IfName: "eth0"}}
	if err := e.inHost(func() error { return e.cni.GCNetworkList(t.Context(), e.conf(), valid) }); err != nil {
		t.Errorf("GC: %v", err)
	}
	if l := sortedLinks(e, p); !slices.Equal(l, []string{"eth0", "net1"}) {
		t.Errorf("GC with the pod valid removed interfaces: %v", l)
	}
	for _, line := range []string{`msg=ADD plugin=multinet pod=` + e.ns + `/p1`, `msg=CHECK `, `msg=STATUS `, `msg=GC `} {
		if !strings.Contains(e.log(), line) {
			t.Errorf("log lacks %q\n%s", line, e.log())
		}
	}

	e.mustDel(p)
	e.noStatus(p)
	e.nothingLeft(p, "after DEL")
	if _, err := os.Stat(filepath.Join(e.cniDir, p.cid+".json")); !os.IsNotExist(err) {
		t.Errorf("plan left after DEL: %v", err)
	}
	e.mustDel(p) // idempotent

	// A second pod, removed by GC this time.
	p2 := e.pod("p2", map[string]string{api.NetworksAnnotation: "blue"})
	e.mustAdd(p2)
	if err := e.inHost(func() error { return e.cni.GCNetworkList(t.Context(), e.conf(), []spec.Attachment{}) }); err != nil {
		t.Errorf("GC: %v", err)
	}
	e.nothingLeft(p2, "after GC")

	// Metrics.
	for _, m := range []struct {
		name   string
		labels []string
	}{
		{"multinet_verb_duration_seconds_count", []string{`verb="ADD"`, `result="success"`}},
		{"multinet_verb_duration_seconds_count", []string{`verb="DEL"`}},
		{"multinet_verb_duration_seconds_count", []string{`verb="CHECK"`}},
		{"multinet_verb_duration_seconds_count", []string{`verb="GC"`}},
		{"multinet_verb_duration_seconds_count", []string{`verb="STATUS"`}},
		{"multinet_delegate_duration_seconds_count", []string{`verb="ADD"`, `plugin="bridge"`, `result="success"`}},
		{"multinet_delegate_duration_seconds_count", []string{`verb="DEL"`, `plugin="tuning"`}},
		{"multinet_api_request_duration_seconds_count", []string{`method="PATCH"`, `resource="pods/status"`}},
		{"multinet_api_request_duration_seconds_count", []string{`method="LIST"`, `resource="pods"`}},
		{"multinet_attachments_total", []string{`verb="ADD"`, `network="` + e.ns + `/blue"`, `result="success"`}},
		{"multinet_attachments_total", []string{`verb="DEL"`, `network="kube-system/cluster"`}},
		{"multinet_object_reads_total", []string{`kind="pod"`, `source="informer"`}},
		{"multinet_object_reads_total", []string{`kind="nad"`, `source="informer"`}},
		{"process_resident_memory_bytes", nil},
	} {
		if v := d.metric(m.name, m.labels...); v <= 0 {
			t.Errorf("metric %s%v = %v, want > 0", m.name, m.labels, v)
		}
	}
	if v := d.metric("multinet_object_reads_total", `source="api"`); v != 0 {
		t.Errorf("API reads = %v, want 0 (the informers had both objects)", v)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body, err := d.get(path); err != nil || code != 200 || body != "ok\n" {
			t.Errorf("%s = %d %q %v", path, code, body, err)
		}
	}
	if err := d.stop(syscall.SIGTERM); err != nil {
		t.Errorf("daemon exit after SIGTERM: %v\n%s", err, d.output())
	}
}

// A pod the informer has not seen (here: bound to another node, so it
// never will) is read with a GET; so is a NAD created a moment before the
// ADD. How often a pod just created on this node misses the informer is
// measured and logged.
func TestThickPodNotYetInInformer(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon(nil)
	node := e.nodeName
	e.nodeName = "another-node"
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	p := e.pod("elsewhere", map[string]string{api.NetworksAnnotation: "blue"})
	e.mustAdd(p)
	if st := statusOf(t, e, p); len(st) != 2 {
		t.Errorf("status = %+v", st)
	}
	if v := d.metric("multinet_object_reads_total", `kind="pod"`, `source="api"`); v != 1 {
		t.Errorf("pod GETs = %v, want 1", v)
	}
	e.mustDel(p)

	// Pods of this node created and ADDed at once, as the kubelet would
	// (it learns of a pod from the same watch as the informer).
	e.nodeName = node
	const n = 10
	before := d.metric("multinet_object_reads_total", `kind="pod"`, `source="informer_miss"`)
	for i := 0; i < n; i++ {
		p := e.pod(fmt.Sprintf("fresh%d", i), nil)
		e.mustAdd(p)
		e.mustDel(p)
	}
	misses := d.metric("multinet_object_reads_total", `kind="pod"`, `source="informer_miss"`) - before
	t.Logf("pods ADDed right after their creation: %d of %d were not in the informer yet (read with a GET)", int(misses), n)
}

// An edited NAD is used by the next ADD once the informer has the edit.
func TestThickNADChangesSeen(t *testing.T) {
	e := newEnv(t)
	e.startDaemon(nil)
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	addr := func(name string) string {
		p := e.pod(name, map[string]string{api.NetworksAnnotation: "blue"})
		e.mustAdd(p)
		defer e.mustDel(p)
		return statusOf(t, e, p)[1].IPs[0]
	}
	if a := addr("p1"); !strings.HasPrefix(a, "10.78.1.") {
		t.Fatalf("address %s, want one in 10.78.1.0/24", a)
	}
	cfg, _ := json.Marshal(e.bridgeNAD("", 3, nil))
	obj := map[string]any{"apiVersion": api.APIVersion(api.NADVersion), "kind": api.NADKind,
		"metadata": map[string]any{"name": "blue", "namespace": e.ns}, "spec": map[string]any{"config": string(cfg)}}
	if _, err := e.c.Apply(obj); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 2; ; i++ {
		a := addr(fmt.Sprintf("p%d", i))
		if strings.HasPrefix(a, "10.78.3.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the edited NAD is not used after 10 s (address %s)", a)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Without a daemon the shim fails with code 11 (try again later) and says
// where it looked; after SIGTERM new calls get the same, while the ADDs in
// flight finish (here they wait for the readiness file, which appears only
// after the SIGTERM).
func TestThickDaemonDownAndSIGTERM(t *testing.T) {
	e := newEnv(t)
	ready := filepath.Join(e.dir, "ready")
	e.opts["readinessindicatorfile"] = ready
	d := e.startDaemon(nil)
	const n = 3
	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = e.pod(fmt.Sprintf("p%d", i), nil)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.add(p)
		}()
	}
	// Wait until all are in flight, then SIGTERM.
	deadline := time.Now().Add(20 * time.Second)
	for d.metric("multinet_requests_in_flight") < n {
		if time.Now().After(deadline) {
			t.Fatalf("ADDs not in flight: %v\n%s", d.metrics(), d.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	// The socket goes away at once: a new call is refused with code 11.
	deadline = time.Now().Add(10 * time.Second)
	late := e.pod("late", nil)
	for {
		_, err := e.add(late)
		ce := spec.AsError(err, 0)
		if ce != nil && ce.Code == spec.ErrTryAgainLater {
			if !strings.Contains(ce.Error(), "daemon") || !strings.Contains(ce.Error(), d.socketDir) {
				t.Errorf("the error does not say what is missing: %v", ce)
			}
			break
		}
		if err == nil {
			t.Fatal("a new ADD ran after SIGTERM")
		}
		if time.Now().After(deadline) {
			t.Fatalf("new ADD after SIGTERM: %v, want code 11", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-d.exited:
		t.Fatal("the daemon exited with ADDs in flight")
	default:
	}
	os.WriteFile(ready, nil, 0o644)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("in-flight ADD %d: %v", i, err)
		}
	}
	select {
	case <-d.exited:
		if d.exitErr != nil {
			t.Errorf("daemon exit: %v", d.exitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not exit after its requests finished")
	}
	for _, p := range pods {
		if len(statusOf(t, e, p)) != 1 {
			t.Errorf("pod %s has no status", p.name)
		}
	}
	// Daemon down: DEL is refused too (code 11; the runtime retries).
	if ce := spec.AsError(e.del(pods[0]), 0); ce == nil || ce.Code != spec.ErrTryAgainLater {
		t.Errorf("DEL with the daemon down = %v, want code 11", ce)
	}
	// A new daemon DELs them: the plans are on disk.
	e.daemon = nil
	e.startDaemon(nil)
	for _, p := range pods {
		e.mustDel(p)
		e.noStatus(p)
	}
	for _, p := range pods {
		e.nothingLeft(p, "DEL after the restart")
	}
}

// A daemon killed (SIGKILL) and started again: CHECK and DEL of what the
// first one added work (cniDir on disk is the truth; the stale socket is
// replaced).
func TestThickRestartThenDel(t *testing.T) {
	e := newEnv(t)
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	d := e.startDaemon(nil)
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})
	e.mustAdd(p)
	d.stop(syscall.SIGKILL)
	e.daemon = nil
	e.startDaemon(nil)
	if err := e.check(p); err != nil {
		t.Errorf("CHECK after the restart: %v", err)
	}
	e.mustDel(p)
	e.nothingLeft(p, "DEL after the restart")
	e.noStatus(p)
}

// The burst: 100 pods ADDed at once with maxParallelRequests 8. At most 8
// run at a time (the rest wait), all succeed, the daemon's peak RSS is
// reported, and 100 DELs leave nothing.
func TestThickBurst100(t *testing.T) {
	e := newEnv(t)
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	const n, limit = 100, 8
	d := e.startDaemon(map[string]any{"maxParallelRequests": limit, "logLevel": "warn"})
	idle := d.peakRSS()
	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = e.pod(fmt.Sprintf("b%d", i), map[string]string{api.NetworksAnnotation: "blue"})
	}
	// Let the informer see them all (the kubelet would not start them sooner).
	time.Sleep(500 * time.Millisecond)
	var maxInFlight, maxWaiting float64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			ms := d.metrics()
			maxInFlight = max(maxInFlight, ms["multinet_requests_in_flight"])
			maxWaiting = max(maxWaiting, ms["multinet_requests_waiting"])
		}
	}()
	errs := make([]error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.add(p)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(stop)
	<-sampled
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			if failed < 4 {
				t.Errorf("ADD %d: %v", i, err)
			}
		}
	}
	peak := d.peakRSS()
	t.Logf("100 pods at once: %d failed, took %v; in flight at most %v (limit %d), waiting at most %v; daemon RSS idle %.1f MiB, peak %.1f MiB",
		failed, took.Round(time.Millisecond), maxInFlight, limit, maxWaiting, float64(idle)/(1<<20), float64(peak)/(1<<20))
	if maxInFlight > limit {
		t.Errorf("%v requests ran at once, limit %d", maxInFlight, limit)
	}
	if peak > 200<<20 {
		t.Errorf("peak RSS %d MiB: memory is not bounded", peak>>20)
	}
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.del(p); err != nil {
				t.Errorf("DEL %s: %v", p.name, err)
			}
		}()
	}
	wg.Wait()
	if l := e.leases(); len(l) != 0 {
		t.Errorf("leases left after the DELs: %v", l)
	}
	if ids, _ := filepath.Glob(filepath.Join(e.cniDir, "*.json")); len(ids) != 0 {
		t.Errorf("plans left: %v", ids)
	}
}
