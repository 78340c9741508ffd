package clusteripam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/kubetest"
	"github.com/patchbay-cni/patchbay/spec"
)

// setNetworkStatus writes a pod's network-status annotation.
func (w *world) setNetworkStatus(p PodRef, ips ...string) {
	w.t.Helper()
	b, _ := json.Marshal([]map[string]any{{"name": "ns/net", "interface": "net1", "ips": ips, "default": false}})
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{networkStatusAnnotation: string(b)}}}
	if _, _, err := w.c.DoAs(w.c.Token, "PATCH", podPath(p.Namespace, p.Name)+"/status", "application/merge-patch+json", patch); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) setPhase(p PodRef, phase string) {
	w.t.Helper()
	patch := map[string]any{"status": map[string]any{"phase": phase}}
	if _, _, err := w.c.DoAs(w.c.Token, "PATCH", podPath(p.Namespace, p.Name)+"/status", "application/merge-patch+json", patch); err != nil {
		w.t.Fatal(err)
	}
}

// allocFor allocates one address for pod p (no DEL will come for the dead
// ones: their node "died").
func (w *world) allocFor(p PodRef, c *Config) netip.Addr {
	w.t.Helper()
	at := attachment("node-x")
	at.Pod = p
	got, err := w.al.Add(context.Background(), c, at)
	if err != nil {
		w.t.Fatal(err)
	}
	return got[0].Address.Addr()
}

// Reconciliation frees the allocations of dead pods and only those.
func TestReconcileFreesOnlyTheDead(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	c := w.config(map[string]any{"range": "10.52.0.0/24"}, "", nil)
	live := w.pod("live")
	aLive := w.allocFor(live, c)
	w.setNetworkStatus(live, aLive.String())
	gone := w.pod("gone")
	aGone := w.allocFor(gone, c)
	recreated := w.pod("recreated")
	aRecreated := w.allocFor(recreated, c)
	failed := w.pod("failed")
	aFailed := w.allocFor(failed, c)
	// Dead per its own reference, but a live pod lists the address in its
	// network-status (bare, as Multus writes it): kept.
	listedBare := w.pod("listed-bare")
	aListedBare := w.allocFor(listedBare, c)
	listedPrefix := w.pod("listed-prefix")
	aListedPrefix := w.allocFor(listedPrefix, c)
	witness := w.pod("witness")
	w.setNetworkStatus(witness, aListedBare.String(), aListedPrefix.String()+"/24")
	// Made outside Kubernetes (no pod reference): not ours to judge.
	noPod, err := w.al.Add(ctx, c, attachment("node-x"))
	if err != nil {
		t.Fatal(err)
	}

	w.deletePod(gone)
	w.deletePod(recreated)
	w.pod("recreated") // same name, new UID
	w.setPhase(failed, "Failed")
	w.deletePod(listedBare)
	w.deletePod(listedPrefix)

	dry, err := Reconcile(ctx, w.api, ReconcileOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Freed) < 3 {
		t.Errorf("dry run found %v", dry.Freed)
	}
	w.wantAllocations(7, "after a dry run")

	rep, err := Reconcile(ctx, w.api, ReconcileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reconcile: %s", rep)
	left := map[netip.Addr]bool{}
	for _, a := range w.allocations() {
		left[netip.MustParseAddr(a.Spec.Address)] = true
	}
	for a, want := range map[netip.Addr]bool{aLive: true, aGone: false, aRecreated: false, aFailed: false,
		aListedBare: true, aListedPrefix: true, noPod[0].Address.Addr(): true} {
		if left[a] != want {
			t.Errorf("%s: kept %v, want %v", a, left[a], want)
		}
	}
	if len(rep.Errors) > 0 {
		t.Errorf("errors: %v", rep.Errors)
	}
}

// The CNI GC verb: this node's attachments of this network that the
// runtime no longer lists are freed; other nodes', other networks' and
// listed ones stay.
func TestGCVerb(t *testing.T) {
	w := newWorld(t)
	a, b := w.node("node-a"), w.node("node-b")
	conf := func(n *node, name string) []byte {
		cf := n.netconf(map[string]any{"range": "10.53.0.0/24"}, nil)
		return []byte(strings.Replace(string(cf), `"name":"net"`, `"name":"`+name+`"`, 1))
	}
	for _, x := range []struct {
		n        *node
		net, cid string
	}{{a, "net", "c1"}, {a, "net", "c2"}, {a, "net", "c3"}, {b, "net", "c4"}, {a, "other", "c5"}} {
		if _, err := x.n.add(t, conf(x.n, x.net), x.cid, ""); err != nil {
			t.Fatal(err)
		}
	}
	var m map[string]any
	json.Unmarshal(conf(a, "net"), &m)
	m["cni.dev/valid-attachments"] = []any{map[string]any{"containerID": "c1", "ifname": "net1"}}
	gc, _ := json.Marshal(m)
	if _, err := a.run(t, call{verb: "GC", conf: gc}); err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, al := range w.allocations() {
		held = append(held, al.Spec.ContainerID)
	}
	slices.Sort(held)
	if !slices.Equal(held, []string{"c1", "c4", "c5"}) {
		t.Errorf("after GC on node-a with c1 valid: %v, want c1 c4 c5", held)
	}
}

// A pod's ADD killed after its allocation exists, and no DEL ever comes
// (the node died); the pod is deleted; `cluster-ipam reconcile` frees the
// address, and a live pod's stays.
func TestKilledThenReconciled(t *testing.T) {
	w := newWorld(t)
	nd := w.node("node-a")
	conf := nd.netconf(map[string]any{"range": "10.54.0.0/24"}, nil)
	live := w.pod("live")
	if _, err := nd.add(t, conf, "live", "K8S_POD_NAMESPACE="+w.ns+";K8S_POD_NAME=live;K8S_POD_UID="+live.UID); err != nil {
		t.Fatal(err)
	}
	killedAfter := 0
	var completed []string
	// The Nth connect, write and exit_group: before the request, around
	// it, and after the answer was printed (exit_group).
	for _, sc := range []string{"connect", "write", "exit_group"} {
		for when := 1; when < 60; when++ {
			name := fmt.Sprintf("k-%s-%d", strings.ReplaceAll(sc, "_", ""), when)
			p := w.pod(name)
			wrap := []string{"strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=" + sc, "-e", fmt.Sprintf("inject=%s:signal=KILL:when=%d", sc, when)}
			_, err := nd.run(t, call{verb: "ADD", cid: name, conf: conf, wrap: wrap,
				args: "K8S_POD_NAMESPACE=" + w.ns + ";K8S_POD_NAME=" + name + ";K8S_POD_UID=" + p.UID})
			if err == nil {
				completed = append(completed, name) // ran to the end: a live pod
				break
			}
			var ee *exec.ExitError
			if !(errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled()) && !strings.Contains(err.Error(), "signal: killed") {
				t.Fatalf("%s when=%d: %v", sc, when, err)
			}
			for _, a := range w.allocations() {
				if a.Spec.ContainerID == name {
					killedAfter++
				}
			}
			w.deletePod(p)
		}
	}
	if killedAfter == 0 {
		t.Fatal("no kill landed after the allocation was made")
	}
	kc := t.TempDir() + "/kc"
	w.c.WriteKubeconfig(kc, w.c.Token)
	out, err := exec.Command(nd.bin, "reconcile", "--kubeconfig", kc).CombinedOutput()
	if err != nil {
		t.Fatalf("cluster-ipam reconcile: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	var left []string
	for _, a := range w.allocations() {
		left = append(left, a.Spec.ContainerID)
	}
	slices.Sort(left)
	want := append(completed, "live")
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("after reconcile: %v, want only the live pods' %v", left, want)
	}
}

// The apiserver restarts while ADDs run on two nodes: ADDs wait for it
// (or fail cleanly); no address is handed out twice and DEL leaves
// nothing.
func TestAPIServerRestart(t *testing.T) {
	c := kubetest.Start(t)
	installCRDs(t, c)
	api := apiClient(t, c)
	w := &world{t: t, c: c, api: api, al: &Allocator{Client: api, RetryFor: 5 * time.Second}, net: "restart"}
	nodes := []*node{w.node("node-a"), w.node("node-b")}
	conf := func(i int) []byte { return nodes[i%2].netconf(map[string]any{"range": "10.55.0.0/22"}, nil) }
	var mu sync.Mutex
	results := map[string]*spec.Result{}
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cid := fmt.Sprintf("g%d-%d", g, i)
				res, err := nodes[g%2].add(t, conf(g), cid, "")
				mu.Lock()
				if err != nil {
					failures = append(failures, cid+": "+err.Error())
				}
				results[cid] = res
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Second)
	if err := c.RestartAPIServer(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	ok := 0
	seen := map[netip.Addr]string{}
	for cid, res := range results {
		if res == nil {
			continue
		}
		ok++
		a := res.IPs[0].Address.Addr()
		if other, dup := seen[a]; dup {
			t.Errorf("%s handed out to %s and %s", a, other, cid)
		}
		seen[a] = cid
	}
	t.Logf("%d ADDs succeeded, %d failed across the restart", ok, len(failures))
	for _, f := range failures {
		if !strings.Contains(f, "Kubernetes API unavailable") {
			t.Errorf("failure other than the API being away: %s", f)
		}
	}
	if ok < 10 {
		t.Errorf("only %d ADDs succeeded", ok)
	}
	for cid, res := range results {
		if err := nodes[0].del(t, conf(0), cid, res); err != nil {
			t.Errorf("DEL %s: %v", cid, err)
		}
	}
	if left := w.allocations(); len(left) != 0 {
		t.Errorf("%d allocations left after DEL", len(left))
	}
}
