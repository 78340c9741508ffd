package clusteripam

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// claim creates an IPAMClaim in the world's namespace.
func (w *world) claim(name string) {
	w.t.Helper()
	_, err := w.c.Create(map[string]any{"apiVersion": claimGroupVersion, "kind": "IPAMClaim",
		"metadata": map[string]any{"name": name, "namespace": w.ns},
		"spec":     map[string]any{"network": "net", "interface": "net1"}})
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) readClaim(name string) *IPAMClaim {
	w.t.Helper()
	out, err := w.c.Get(claimGroupVersion, "IPAMClaim", w.ns, name)
	if err != nil {
		w.t.Fatal(err)
	}
	var cl IPAMClaim
	if err := json.Unmarshal(out, &cl); err != nil {
		w.t.Fatal(err)
	}
	return &cl
}

// claimConfig is a dual-stack configuration whose attachment carries the
// claim reference (as multinet passes it) for pod p.
func (w *world) claimConfig(claim string, p PodRef) *Config {
	return w.config(map[string]any{"range": "10.50.0.0/24", "ipRanges": []any{map[string]any{"range": "fd50::/64"}}},
		"K8S_POD_NAMESPACE="+p.Namespace+";K8S_POD_NAME="+p.Name+";K8S_POD_UID="+p.UID,
		map[string]any{"args": map[string]any{"cni": map[string]any{ClaimArg: claim}}})
}

// The IPAMClaim lifecycle (multi-net spec §8): the first pod's ADD
// allocates and records the addresses in the claim's status (ips,
// ownerPod, IPsAllocated/SuccessfulAllocation); DEL keeps them; the next
// pod — another name, another node — gets the same ones; a claim held by
// a running pod is refused to a second pod; deleting the claim frees them
// (reconciler).
func TestClaimLifecycle(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.claim("vm1.net")
	p1 := w.pod("virt-launcher-vm1-aaaaa")
	c1 := w.claimConfig("vm1.net", p1)
	at1 := attachment("node-a")
	at1.Pod = p1
	got1, err := w.al.Add(ctx, c1, at1)
	if err != nil {
		t.Fatal(err)
	}
	cl := w.readClaim("vm1.net")
	var want []string
	for _, a := range got1 {
		want = append(want, a.Address.String())
	}
	if !slices.Equal(cl.Status.IPs, want) || cl.Status.OwnerPod == nil || cl.Status.OwnerPod.Name != p1.Name {
		t.Fatalf("claim status %+v, want ips %v owner %s", cl.Status, want, p1.Name)
	}
	if len(cl.Status.Conditions) != 1 || cl.Status.Conditions[0].Type != ConditionIPsAllocated || cl.Status.Conditions[0].Status != "True" ||
		cl.Status.Conditions[0].Reason != ReasonAllocated || cl.Status.Conditions[0].LastTransitionTime == "" {
		t.Errorf("conditions %+v", cl.Status.Conditions)
	}
	for _, a := range w.wantAllocations(2, "after the first pod's ADD") {
		if a.Spec.Claim == nil || a.Spec.Claim.UID != cl.Metadata.UID || a.Metadata.Labels[LabelClaim] != cl.Metadata.UID || !at1.holds(a) {
			t.Errorf("allocation %+v", a)
		}
	}
	// A second pod while the first runs: refused, code 11.
	p2 := w.pod("virt-launcher-vm1-bbbbb")
	at2 := attachment("node-b")
	at2.Pod = p2
	_, err = w.al.Add(ctx, w.claimConfig("vm1.net", p2), at2)
	if ce := spec.AsError(err, 0); ce == nil || ce.Code != spec.ErrTryAgainLater || !strings.Contains(ce.Msg, "is in use by running pod "+w.ns+"/"+p1.Name) {
		t.Fatalf("second pod while the first runs: %v", err)
	}
	// DEL keeps the addresses, unbound.
	if err := w.al.Del(ctx, c1, at1, result(got1)); err != nil {
		t.Fatal(err)
	}
	for _, a := range w.wantAllocations(2, "after the first pod's DEL") {
		if a.bound() || a.Metadata.Labels[LabelAttachment] != "" || a.Spec.Claim == nil {
			t.Errorf("after DEL: %+v", a)
		}
	}
	// Reconciliation keeps an existing claim's addresses.
	if rep, err := Reconcile(ctx, w.api, ReconcileOptions{}); err != nil || slices.ContainsFunc(rep.Freed, func(s string) bool { return strings.Contains(s, "10.50.") }) {
		t.Fatalf("reconcile with the claim: %v %+v", err, rep)
	}
	// The next pod, another node: the same addresses.
	got2, err := w.al.Add(ctx, w.claimConfig("vm1.net", p2), at2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(addrs(got2), addrs(got1)) {
		t.Fatalf("second pod got %v, want the claim's %v", addrs(got2), addrs(got1))
	}
	if cl := w.readClaim("vm1.net"); cl.Status.OwnerPod == nil || cl.Status.OwnerPod.Name != p2.Name || !slices.Equal(cl.Status.IPs, want) {
		t.Errorf("claim after the second pod: %+v", cl.Status)
	}
	// The second pod's node dies: no DEL; the pod object is removed. A
	// third pod takes the claim over (the holder is no longer running).
	w.deletePod(p2)
	p3 := w.pod("virt-launcher-vm1-ccccc")
	at3 := attachment("node-c")
	at3.Pod = p3
	got3, err := w.al.Add(ctx, w.claimConfig("vm1.net", p3), at3)
	if err != nil || !slices.Equal(addrs(got3), addrs(got1)) {
		t.Fatalf("third pod after the holder died: %v %v", addrs(got3), err)
	}
	w.wantAllocations(2, "claim taken over")
	if err := w.al.Del(ctx, w.claimConfig("vm1.net", p3), at3, result(got3)); err != nil {
		t.Fatal(err)
	}
	// The claim is deleted: the reconciler frees its addresses.
	if err := w.c.Delete(claimGroupVersion, "IPAMClaim", w.ns, "vm1.net"); err != nil {
		t.Fatal(err)
	}
	rep, err := Reconcile(ctx, w.api, ReconcileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.wantAllocations(0, "after the claim was deleted and reconciled: "+rep.String())
}

// A claimed address taken by someone else is a conflict: ADD fails and
// the claim's condition says IPAddressConflict; an exhausted range says
// SubnetExhausted. A missing claim is code 11.
func TestClaimConditions(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	p := w.pod("p")
	// Exhaustion: a /30 has two usable addresses, both taken.
	small := func(claim string) *Config {
		return w.config(map[string]any{"range": "10.51.0.0/30"}, "K8S_POD_NAMESPACE="+w.ns+";K8S_POD_NAME=p;K8S_POD_UID="+p.UID,
			map[string]any{"args": map[string]any{"cni": map[string]any{ClaimArg: claim}}})
	}
	plain := w.config(map[string]any{"range": "10.51.0.0/30"}, "", nil)
	for range 2 {
		if _, err := w.al.Add(ctx, plain, attachment("n")); err != nil {
			t.Fatal(err)
		}
	}
	w.claim("full")
	at := attachment("n")
	at.Pod = p
	if _, err := w.al.Add(ctx, small("full"), at); err == nil {
		t.Fatal("ADD in a full range succeeded")
	}
	if cl := w.readClaim("full"); len(cl.Status.Conditions) != 1 || cl.Status.Conditions[0].Status != "False" || cl.Status.Conditions[0].Reason != ReasonSubnetExhausted || len(cl.Status.IPs) != 0 {
		t.Errorf("claim after exhaustion: %+v", cl.Status)
	}
	// Conflict: the claim lists an address another attachment holds.
	w.claim("conflict")
	taken := w.allocations()[0].Spec.Address
	cl := w.readClaim("conflict")
	patch := map[string]any{"status": map[string]any{"ips": []any{taken + "/30"}}}
	if _, _, err := w.c.DoAs(w.c.Token, "PATCH", claimPath(w.ns, "conflict")+"/status", "application/merge-patch+json", patch); err != nil {
		t.Fatal(err)
	}
	_ = cl
	_, err := w.al.Add(ctx, small("conflict"), at)
	if err == nil || !strings.Contains(err.Error(), "address "+taken+" of IPAMClaim "+w.ns+"/conflict is allocated to container") {
		t.Fatalf("claimed address held by another: %v", err)
	}
	if cl := w.readClaim("conflict"); len(cl.Status.Conditions) != 1 || cl.Status.Conditions[0].Reason != ReasonIPAddressConflict {
		t.Errorf("claim after conflict: %+v", cl.Status)
	}
	_, err = w.al.Add(ctx, small("missing"), at)
	if ce := spec.AsError(err, 0); ce == nil || ce.Code != spec.ErrTryAgainLater || !strings.Contains(ce.Msg, "IPAMClaim "+w.ns+"/missing (args.cni.ipam-claim-reference) not found") {
		t.Errorf("missing claim: %v", err)
	}
}
