package clusteripam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/multinet/kube"
	"github.com/patchbay-cni/patchbay/spec"
)

// IPAMClaim, IPAMClaimStatus, OwnerPod, Condition: the multi-net spec's
// §8 object with the upstream module's status fields (multinet/api says why
// they are written out; TestClaimTypesMatchUpstream compares them).
type (
	IPAMClaim = api.IPAMClaim
	Condition = api.Condition
	OwnerPod  = api.OwnerPod
)

// The condition the upstream IPAMClaim users (OVN-Kubernetes, KubeVirt)
// read, and its reasons.
const (
	ConditionIPsAllocated   = "IPsAllocated"
	ReasonAllocated         = "SuccessfulAllocation"
	ReasonIPAddressConflict = reasonConflict
	ReasonSubnetExhausted   = reasonExhausted
)

const (
	claimGroupVersion = "k8s.cni.cncf.io/v1alpha1"
	claimResource     = "ipamclaims"
)

func claimPath(ns, name string) string {
	return "/apis/" + claimGroupVersion + "/namespaces/" + url.PathEscape(ns) + "/" + claimResource + "/" + url.PathEscape(name)
}

// getClaim reads a claim. A quorum read (not cached) sees the status the
// last ADD wrote a moment ago; a cached read is for existence checks, and
// a miss there is read again from etcd (a just-created claim is found).
func (al *Allocator) getClaim(ctx context.Context, ns, name string, cached bool) (*IPAMClaim, error) {
	var cl IPAMClaim
	err := al.retry(ctx, func() error { return al.Client.Get(ctx, claimPath(ns, name), cached, &cl) })
	if cached && kube.IsNotFound(err) {
		err = al.retry(ctx, func() error { return al.Client.Get(ctx, claimPath(ns, name), false, &cl) })
	}
	if err != nil {
		return nil, err
	}
	return &cl, nil
}

// claimAddrs parses the claim's status.ips ("10.1.2.3/24" or bare).
func claimAddrs(cl *IPAMClaim) []netip.Addr {
	var out []netip.Addr
	for _, s := range cl.Status.IPs {
		if a, _, err := spec.ParseIPMaybePrefix(strings.TrimSpace(s)); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// addClaimed is ADD for an attachment with an IPAMClaim: the claim's
// addresses (status.ips, or allocations already labelled with the claim
// after an ADD that died before writing the status) are bound to this
// attachment, ranges without one get a new address owned by the claim,
// and the claim's status records them (ips, ownerPod, IPsAllocated). A
// claim bound to another running pod is refused.
func (al *Allocator) addClaimed(ctx context.Context, c *Config, at Attachment) ([]Assigned, error) {
	ns := c.Pod.Namespace
	cl, err := al.getClaim(ctx, ns, c.Claim, false)
	if kube.IsNotFound(err) {
		return nil, spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: IPAMClaim %s/%s (args.cni.%s) not found", ns, c.Claim, ClaimArg)
	}
	if err != nil {
		return nil, apiError("reading IPAMClaim "+ns+"/"+c.Claim, err)
	}
	ref := &ClaimRef{Namespace: ns, Name: c.Claim, UID: cl.Metadata.UID}
	owned := claimAddrs(cl)
	if len(owned) == 0 {
		var allocs []*Allocation
		if err := al.retry(ctx, func() (err error) { allocs, err = al.store().list(ctx, LabelClaim+"="+ref.UID, false); return }); err != nil {
			return nil, apiError("listing the allocations of IPAMClaim "+ns+"/"+c.Claim, err)
		}
		for _, a := range allocs {
			if addr, err := netip.ParseAddr(a.Spec.Address); err == nil {
				owned = append(owned, addr)
			}
		}
	}
	var out []Assigned
	var fresh []*Allocation
	fail := func(err error) ([]Assigned, error) {
		al.rollback(ctx, fresh)
		var ae *allocError
		if errors.As(err, &ae) {
			al.claimCondition(ctx, cl, "False", ae.reason, ae.err.Msg)
		}
		return nil, err
	}
	for _, r := range c.Ranges {
		i := slices.IndexFunc(owned, r.Requestable)
		var a *Allocation
		if i >= 0 {
			a, err = al.bindClaimed(ctx, c, r, owned[i], ref, at)
		} else {
			a, err = al.dynamic(ctx, c, r, at, ref)
			if a != nil {
				fresh = append(fresh, a)
			}
		}
		if err != nil {
			return fail(err)
		}
		out = append(out, assigned(r, a))
	}
	for _, o := range owned {
		if c.rangeOf(o) == nil {
			al.log().Warn("an address of the IPAMClaim is in no configured range: not used", "claim", ns+"/"+c.Claim, "address", o)
		}
	}
	if err := al.writeClaimStatus(ctx, c, cl, out, at); err != nil {
		al.rollback(ctx, fresh)
		return nil, err
	}
	return out, nil
}

// bindClaimed binds the claim's address addr to the attachment.
func (al *Allocator) bindClaimed(ctx context.Context, c *Config, r *Range, addr netip.Addr, ref *ClaimRef, at Attachment) (*Allocation, error) {
	st := al.store()
	name := ObjectName(Scope(c.NetworkName, c.Overlapping, r.Prefix), addr)
	for range 5 {
		var cur *Allocation
		err := al.retry(ctx, func() (err error) { cur, err = st.get(ctx, name, false); return })
		if kube.IsNotFound(err) {
			// Claimed but not allocated (freed by an administrator, or the
			// claim was filled in by hand): allocate it for the claim.
			return al.exact(ctx, c, r, addr, "IPAMClaim "+ref.Namespace+"/"+ref.Name, at, ref)
		}
		if err != nil {
			return nil, apiError("reading IPAllocation "+name, err)
		}
		if cur.Spec.Claim == nil || cur.Spec.Claim.UID != ref.UID {
			return nil, &allocError{reasonConflict, spec.Errorf(spec.ErrInvalidNetworkConfig,
				"cluster-ipam: address %s of IPAMClaim %s/%s is allocated to %s", addr, ref.Namespace, ref.Name, cur.holder())}
		}
		if at.holds(cur) {
			return cur, nil
		}
		if cur.bound() && !samePod(cur.Spec.Pod, at.Pod) {
			live, err := al.podLive(ctx, cur.Spec.Pod)
			if err != nil {
				return nil, apiError("reading the pod holding IPAMClaim "+ref.Namespace+"/"+ref.Name, err)
			}
			if live {
				return nil, spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: IPAMClaim %s/%s is in use by running %s; it is given to another pod only once that one is gone",
					ref.Namespace, ref.Name, cur.holder())
			}
		}
		bind(cur, at)
		got, err := st.update(ctx, cur)
		if kube.IsConflict(err) || kube.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, apiError("binding IPAllocation "+name, err)
		}
		return got, nil
	}
	return nil, spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: IPAMClaim %s/%s: address %s kept changing; try again", ref.Namespace, ref.Name, addr)
}

func samePod(a *PodRef, b PodRef) bool {
	if a == nil || a.Name == "" || b.Name == "" {
		return false
	}
	if a.UID != "" && b.UID != "" {
		return a.UID == b.UID
	}
	return a.Namespace == b.Namespace && a.Name == b.Name
}

// podLive reports whether the pod exists (same UID when known) and has not
// terminated. A quorum read: a pod must never be taken for gone because a
// cache is behind.
func (al *Allocator) podLive(ctx context.Context, p *PodRef) (bool, error) {
	if p == nil || p.Name == "" {
		return false, nil
	}
	var pod podInfo
	err := al.retry(ctx, func() error { return al.Client.Get(ctx, podPath(p.Namespace, p.Name), false, &pod) })
	if kube.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return pod.live(p.UID), nil
}

func podPath(ns, name string) string {
	return "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(name)
}

// podInfo is the part of a pod the liveness checks read.
type podInfo struct {
	Metadata ObjectMeta `json:"metadata"`
	Status   struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

// live: the same pod (when uid is known) that has not terminated (a
// terminated pod's sandbox is gone).
func (p *podInfo) live(uid string) bool {
	return (uid == "" || p.Metadata.UID == uid) && p.Status.Phase != "Succeeded" && p.Status.Phase != "Failed"
}

// writeClaimStatus records the addresses, the owner pod and the
// IPsAllocated condition, when any of them differ; conditional on the
// claim's resourceVersion, re-read on conflict. A claim whose ips were
// meanwhile set to other addresses (another pod won a race for it) fails
// the ADD.
func (al *Allocator) writeClaimStatus(ctx context.Context, c *Config, cl *IPAMClaim, out []Assigned, at Attachment) error {
	var ips []string
	var addrs []netip.Addr
	for _, a := range out {
		ips = append(ips, a.Address.String())
		addrs = append(addrs, a.Address.Addr())
	}
	owner := at.Pod.Name
	if owner == "" {
		owner = at.ContainerID
	}
	msg := fmt.Sprintf("IPs %s allocated to pod %s", strings.Join(ips, ", "), at.Pod.String())
	for range 5 {
		// Addresses of ranges no longer configured are dropped from the
		// status (their allocations are freed by the reconciler).
		have := slices.DeleteFunc(claimAddrs(cl), func(a netip.Addr) bool { return c.rangeOf(a) == nil })
		if len(have) > 0 && !sameAddrs(have, addrs) {
			return spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: IPAMClaim %s/%s was given addresses %s by a concurrent ADD; try again",
				cl.Metadata.Namespace, cl.Metadata.Name, strings.Join(cl.Status.IPs, ", "))
		}
		cond := condition(cl, "True", ReasonAllocated, msg)
		if len(have) > 0 && cl.Status.OwnerPod != nil && cl.Status.OwnerPod.Name == owner && cond == nil {
			return nil // nothing to write
		}
		status := map[string]any{"ips": ips, "ownerPod": OwnerPod{Name: owner}}
		if cond != nil {
			status["conditions"] = cond
		}
		patch := map[string]any{"metadata": map[string]any{"resourceVersion": cl.Metadata.ResourceVersion}, "status": status}
		err := al.retry(ctx, func() error {
			return al.Client.Patch(ctx, claimPath(cl.Metadata.Namespace, cl.Metadata.Name)+"/status", kube.MergePatch, patch, nil)
		})
		if err == nil {
			return nil
		}
		if !kube.IsConflict(err) {
			return apiError("writing the status of IPAMClaim "+cl.Metadata.Namespace+"/"+cl.Metadata.Name, err)
		}
		if cl, err = al.getClaim(ctx, cl.Metadata.Namespace, cl.Metadata.Name, false); err != nil {
			return apiError("reading IPAMClaim", err)
		}
	}
	return spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: IPAMClaim %s/%s kept changing; try again", cl.Metadata.Namespace, cl.Metadata.Name)
}

func sameAddrs(a, b []netip.Addr) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	return slices.Equal(a, b)
}

// condition returns the claim's conditions with IPsAllocated set to
// status/reason/message, or nil when it already is (the transition time
// changes only with the status, as metav1 conditions go).
func condition(cl *IPAMClaim, status, reason, message string) []Condition {
	conds := slices.Clone(cl.Status.Conditions)
	now := time.Now().UTC().Format(time.RFC3339)
	i := slices.IndexFunc(conds, func(c Condition) bool { return c.Type == ConditionIPsAllocated })
	want := Condition{Type: ConditionIPsAllocated, Status: status, Reason: reason, Message: message,
		ObservedGeneration: cl.Metadata.Generation, LastTransitionTime: now}
	if i < 0 {
		return append(conds, want)
	}
	if conds[i].Status == status && conds[i].Reason == reason && conds[i].Message == message && conds[i].ObservedGeneration == want.ObservedGeneration {
		return nil
	}
	if conds[i].Status == status {
		want.LastTransitionTime = conds[i].LastTransitionTime
	}
	conds[i] = want
	return conds
}

// claimCondition records a failed allocation on the claim (best effort:
// the ADD fails with its own error anyway).
func (al *Allocator) claimCondition(ctx context.Context, cl *IPAMClaim, status, reason, msg string) {
	conds := condition(cl, status, reason, msg)
	if conds == nil {
		return
	}
	ips := cl.Status.IPs
	if ips == nil {
		ips = []string{}
	}
	patch := map[string]any{"metadata": map[string]any{"resourceVersion": cl.Metadata.ResourceVersion},
		"status": map[string]any{"ips": ips, "conditions": conds}}
	if err := al.Client.Patch(ctx, claimPath(cl.Metadata.Namespace, cl.Metadata.Name)+"/status", kube.MergePatch, patch, nil); err != nil {
		al.log().Warn("could not record the failed allocation on the IPAMClaim", "claim", cl.Metadata.Namespace+"/"+cl.Metadata.Name, "error", err)
	}
}
