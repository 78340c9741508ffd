package clusteripam

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// mnEnv runs multinet (our build) as the runtime's plugin in a cniHost,
// with a bridge + host-local cluster network and NADs using cluster-ipam.
type mnEnv struct {
	*cniHost
	cni  *runtime.CNI
	list *spec.ConfList
}

func (w *world) multinet() *mnEnv {
	w.t.Helper()
	h := w.cniHost("node-m")
	ours := testutil.OurBin(w.t)
	for _, typ := range []string{"multinet", "bridge", "host-local", Type} {
		h.link(ours, typ)
	}
	cluster := filepath.Join(h.dir, "10-cluster.conflist")
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "cluster", "plugins": []any{map[string]any{
		"type": "bridge", "bridge": "mncl0", "isGateway": true,
		"ipam": map[string]any{"type": "host-local", "subnet": "10.63.0.0/24", "dataDir": filepath.Join(h.dir, "hl")}}}})
	if err := os.WriteFile(cluster, b, 0o644); err != nil {
		w.t.Fatal(err)
	}
	b, _ = json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "multinet", "plugins": []any{map[string]any{
		"type": "multinet", "kubeconfig": h.kubeconfig, "clusterNetwork": cluster,
		"confDir": filepath.Join(h.dir, "mnconf"), "cniDir": filepath.Join(h.dir, "mncache"),
		"logFile": filepath.Join(h.dir, "multinet.log"), "logLevel": "debug",
		// The built-in NAD policy wants cluster-ipam's configuration
		// under /etc/cni/net.d; the test's is in its own directory.
		"nadPolicy": map[string]any{"types": map[string]any{"cluster-ipam": map[string]any{"keys": map[string]any{
			"configuration_path": map[string]any{"under": []string{h.dir}}}}}}}}})
	l, err := spec.ParseConfList(b)
	if err != nil {
		w.t.Fatal(err)
	}
	return &mnEnv{cniHost: h, list: l, cni: &runtime.CNI{Path: []string{h.binDir}, CacheDir: filepath.Join(h.dir, "cache")}}
}

// nad creates a NetworkAttachmentDefinition: bridge (declaring the "ips"
// capability) with cluster-ipam.
func (e *mnEnv) nad(name, bridge string, ipam map[string]any) {
	e.w.t.Helper()
	cfg, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": []any{map[string]any{
		"type": "bridge", "bridge": bridge, "capabilities": map[string]any{"ips": true}, "ipam": e.ipam(ipam)}}})
	if _, err := e.w.c.Create(map[string]any{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": name, "namespace": e.w.ns}, "spec": map[string]any{"config": string(cfg)}}); err != nil {
		e.w.t.Fatal(err)
	}
}

// mnPod is a pod object with its sandbox netns.
type mnPod struct {
	PodRef
	cid, path string
}

func (e *mnEnv) pod(name, networks string) *mnPod {
	e.w.t.Helper()
	out, err := e.w.c.Create(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": e.w.ns, "annotations": map[string]any{"k8s.v1.cni.cncf.io/networks": networks}},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}})
	if err != nil {
		e.w.t.Fatal(err)
	}
	var m struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	json.Unmarshal(out, &m)
	_, path := testutil.NewNSLoDown(e.w.t, "mnp")
	return &mnPod{PodRef: PodRef{e.w.ns, name, m.Metadata.UID}, cid: "c" + randHex(8), path: path}
}

func (e *mnEnv) rt(p *mnPod) *runtime.RuntimeConf {
	return &runtime.RuntimeConf{ContainerID: p.cid, NetNS: p.path, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.Namespace}, {"K8S_POD_NAME", p.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.cid}, {"K8S_POD_UID", p.UID}}}
}

func (e *mnEnv) add(p *mnPod) {
	e.w.t.Helper()
	if err := netns.Do(e.path, func() error { _, err := e.cni.AddNetworkList(context.Background(), e.list, e.rt(p)); return err }); err != nil {
		b, _ := os.ReadFile(filepath.Join(e.dir, "multinet.log"))
		e.w.t.Fatalf("multinet ADD of %s: %v\n%s", p.Name, err, b)
	}
}

func (e *mnEnv) del(p *mnPod) {
	e.w.t.Helper()
	if err := netns.Do(e.path, func() error { return e.cni.DelNetworkList(context.Background(), e.list, e.rt(p)) }); err != nil {
		e.w.t.Fatalf("multinet DEL of %s: %v", p.Name, err)
	}
}

// secondaryIPs returns the "ips" of the pod's network-status entry for
// the NAD.
func (e *mnEnv) secondaryIPs(p *mnPod, nad string) []string {
	e.w.t.Helper()
	out, err := e.w.c.Get("v1", "Pod", p.Namespace, p.Name)
	if err != nil {
		e.w.t.Fatal(err)
	}
	var pod podInfo
	json.Unmarshal(out, &pod)
	var st []struct {
		Name string   `json:"name"`
		IPs  []string `json:"ips"`
	}
	json.Unmarshal([]byte(pod.Metadata.Annotations[networkStatusAnnotation]), &st)
	for _, s := range st {
		if s.Name == e.w.ns+"/"+nad {
			return s.IPs
		}
	}
	e.w.t.Fatalf("no network-status entry for %s: %v", nad, pod.Metadata.Annotations)
	return nil
}

// Through multinet: a NAD with cluster-ipam gives pods addresses that
// network-status shows bare and that IPAllocations record with the pod;
// an IPAMClaim selected in the annotation keeps its addresses across pods;
// reconciliation frees a pod gone without DEL and keeps the live ones.
func TestThroughMultinet(t *testing.T) {
	w := newWorld(t)
	e := w.multinet()
	e.nad("blue", "mnbl0", map[string]any{"range": "10.62.0.0/24", "ipRanges": []any{map[string]any{"range": "fd62::/64"}}})
	e.nad("fixed", "mnbl1", map[string]any{"range": "10.65.0.0/24"})
	p1 := e.pod("p1", `[{"name":"blue"}]`)
	e.add(p1)
	ips := e.secondaryIPs(p1, "blue")
	var held []string
	for _, a := range w.wantAllocations(2, "after p1") {
		held = append(held, a.Spec.Address)
		if a.Spec.Pod == nil || a.Spec.Pod.UID != p1.UID || a.Spec.Network != "blue" || a.Spec.IfName != "net1" {
			t.Errorf("allocation %+v", a.Spec)
		}
	}
	slices.Sort(held)
	got := slices.Clone(ips)
	slices.Sort(got)
	if !slices.Equal(got, held) {
		t.Errorf("network-status ips %v, allocations %v (bare addresses expected)", ips, held)
	}

	// A static address through the selection annotation's "ips".
	ps := e.pod("static", `[{"name":"fixed","ips":["10.65.0.9/24"]}]`)
	e.add(ps)
	if got := e.secondaryIPs(ps, "fixed"); !slices.Equal(got, []string{"10.65.0.9"}) {
		t.Errorf("static pod status ips %v, want [10.65.0.9]", got)
	}
	e.del(ps)
	w.wantAllocations(2, "after the static pod's DEL")

	// An IPAMClaim through the selection annotation.
	w.claim("vm1.blue")
	p2 := e.pod("vm1-a", `[{"name":"blue","ipam-claim-reference":"vm1.blue"}]`)
	e.add(p2)
	claimed := e.secondaryIPs(p2, "blue")
	if cl := w.readClaim("vm1.blue"); len(cl.Status.IPs) != 2 || cl.Status.OwnerPod == nil || cl.Status.OwnerPod.Name != "vm1-a" {
		t.Errorf("claim status %+v", cl.Status)
	}
	e.del(p2)
	w.wantAllocations(4, "the claim keeps its addresses after DEL")
	p3 := e.pod("vm1-b", `[{"name":"blue","ipam-claim-reference":"vm1.blue"}]`)
	e.add(p3)
	if again := e.secondaryIPs(p3, "blue"); !slices.Equal(again, claimed) {
		t.Errorf("the claim's next pod got %v, want %v", again, claimed)
	}

	// p4's node dies: no DEL; its pod is deleted.
	p4 := e.pod("p4", `[{"name":"blue"}]`)
	e.add(p4)
	gone := e.secondaryIPs(p4, "blue")
	w.deletePod(p4.PodRef)
	rep, err := Reconcile(context.Background(), w.api, ReconcileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, a := range w.allocations() {
		left[a.Spec.Address] = true
	}
	for _, a := range gone {
		if left[a] {
			t.Errorf("reconcile kept %s of deleted pod p4: %s", a, rep)
		}
	}
	for _, a := range append(ips, claimed...) {
		if !left[a] {
			t.Errorf("reconcile freed %s of a live pod or claim: %s", a, rep)
		}
	}
	e.del(p1)
	e.del(p3)
	remaining := w.wantAllocations(2, "after the DELs: the claim's")
	for _, a := range remaining {
		if a.Spec.Claim == nil || a.bound() || !strings.Contains(strings.Join(claimed, " "), a.Spec.Address) {
			t.Errorf("left: %+v", a.Spec)
		}
	}
	w.c.Delete(claimGroupVersion, "IPAMClaim", w.ns, "vm1.blue")
	if _, err := Reconcile(context.Background(), w.api, ReconcileOptions{}); err != nil {
		t.Fatal(err)
	}
	w.wantAllocations(0, "after the claim was deleted")
}
