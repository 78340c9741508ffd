package clusteripam

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/kube"
)

// ReconcileOptions narrow and describe a reconciliation.
type ReconcileOptions struct {
	// Network, when set, limits it to allocations made by attachments of
	// that CNI network (the GC verb's scope).
	Network string
	// DryRun reports what would be freed without freeing it.
	DryRun bool
	Log    *slog.Logger
}

// ReconcileReport says what a reconciliation found and did.
type ReconcileReport struct {
	Checked  int
	Freed    []string // "address (holder)"
	Released []string // claim addresses unbound from a gone pod
	// Kept counts the allocations kept, by reason.
	Kept   map[string]int
	Errors []string
}

func (r *ReconcileReport) String() string {
	var kept []string
	for k, n := range r.Kept {
		kept = append(kept, fmt.Sprintf("%s: %d", k, n))
	}
	return fmt.Sprintf("checked %d, freed %d, released %d, kept {%s}, errors %d",
		r.Checked, len(r.Freed), len(r.Released), strings.Join(kept, ", "), len(r.Errors))
}

// Reconcile frees the allocations whose holder is gone and only those: a
// pod that no longer exists (or exists under another UID, or has
// terminated) with no DEL ever made (its node died), or an IPAMClaim that
// was deleted. It never frees
//   - an address of an existing IPAMClaim, unless the claim no longer
//     lists it and no live pod holds it (an ADD that died half way);
//   - an address held by a live pod (checked from etcd, not a cache);
//   - an address that any live pod lists in its network-status
//     annotation (bare addresses, as Multus writes them, or with a prefix
//     length);
//   - an allocation without a pod or claim (made outside Kubernetes: the
//     node's runtime frees those, through DEL or GC).
//
// Deletes are conditional on the allocation as listed: one rebound or
// re-created meanwhile is left for the next run. It can run from the
// command line, periodically (Run), in a node agent, and as CNI GC.
func Reconcile(ctx context.Context, c *kube.Client, o ReconcileOptions) (*ReconcileReport, error) {
	al := &Allocator{Client: c, Log: o.Log}
	rep := &ReconcileReport{Kept: map[string]int{}}
	var allocs []*Allocation
	if err := al.retry(ctx, func() (err error) { allocs, err = al.store().list(ctx, "", false); return }); err != nil {
		return nil, apiError("listing IPAllocations", err)
	}
	// Pods and claims from the watch cache: they only ever save an
	// allocation here; every "gone" is confirmed from etcd below.
	pods, inStatus, err := al.podIndex(ctx)
	if err != nil {
		return nil, err
	}
	claims, claimsKnown := al.claimIndex(ctx)
	for _, a := range allocs {
		if o.Network != "" && a.Spec.Network != o.Network && (a.Spec.Claim == nil || a.bound()) {
			continue
		}
		rep.Checked++
		verdict, why := al.judge(ctx, a, pods, inStatus, claims, claimsKnown)
		switch verdict {
		case keep:
			rep.Kept[why]++
			continue
		case unbindIt:
			if !o.DryRun {
				unbind(a)
				if _, err := al.store().update(ctx, a); err != nil {
					rep.Errors = append(rep.Errors, fmt.Sprintf("unbinding %s: %v", a.Metadata.Name, err))
					continue
				}
			}
			rep.Released = append(rep.Released, fmt.Sprintf("%s (%s)", a.Spec.Address, why))
		case free:
			if !o.DryRun {
				if err := al.store().remove(ctx, a); err != nil && !kube.IsNotFound(err) {
					rep.Errors = append(rep.Errors, fmt.Sprintf("freeing %s: %v", a.Metadata.Name, err))
					continue
				}
			}
			rep.Freed = append(rep.Freed, fmt.Sprintf("%s (%s)", a.Spec.Address, why))
		}
		al.log().Info("reconcile", "address", a.Spec.Address, "action", verdict.String(), "why", why, "dryRun", o.DryRun)
	}
	return rep, nil
}

type verdict int

const (
	keep verdict = iota
	free
	unbindIt
)

func (v verdict) String() string { return [...]string{"keep", "free", "unbind"}[v] }

// judge decides one allocation.
func (al *Allocator) judge(ctx context.Context, a *Allocation, pods map[string]*podInfo, inStatus map[netip.Addr]string,
	claims map[string]*IPAMClaim, claimsKnown bool) (verdict, string) {
	claimAlive := false
	var cl *IPAMClaim
	if ref := a.Spec.Claim; ref != nil {
		cl = claims[ref.Namespace+"/"+ref.Name]
		if cl == nil || cl.Metadata.UID != ref.UID {
			if !claimsKnown {
				return keep, "IPAMClaims unreadable"
			}
			var err error
			cl, err = al.getClaim(ctx, ref.Namespace, ref.Name, false) // confirm from etcd
			if err != nil && !kube.IsNotFound(err) {
				return keep, "claim unreadable"
			}
			if err != nil {
				cl = nil
			}
		}
		claimAlive = cl != nil && cl.Metadata.UID == ref.UID
	}
	podAlive := false
	if a.bound() && a.Spec.Pod != nil && a.Spec.Pod.Name != "" {
		p := pods[a.Spec.Pod.Namespace+"/"+a.Spec.Pod.Name]
		podAlive = p != nil && p.live(a.Spec.Pod.UID)
		if !podAlive {
			live, err := al.podLive(ctx, a.Spec.Pod)
			if err != nil {
				return keep, "pod unreadable"
			}
			podAlive = live
		}
	}
	switch {
	case podAlive:
		return keep, "live pod"
	case a.bound() && (a.Spec.Pod == nil || a.Spec.Pod.Name == ""):
		return keep, "no pod reference (not made by Kubernetes)"
	}
	addr, _ := netip.ParseAddr(a.Spec.Address)
	if p, ok := inStatus[addr]; ok {
		return keep, "in the network-status of live pod " + p
	}
	if claimAlive {
		if !a.bound() {
			listed := false
			for _, x := range claimAddrs(cl) {
				listed = listed || x == addr
			}
			if listed {
				return keep, "IPAMClaim"
			}
			return free, fmt.Sprintf("IPAMClaim %s/%s does not list it", cl.Metadata.Namespace, cl.Metadata.Name)
		}
		return unbindIt, fmt.Sprintf("IPAMClaim %s/%s kept, its pod %s is gone", cl.Metadata.Namespace, cl.Metadata.Name, a.Spec.Pod)
	}
	if a.Spec.Claim != nil {
		return free, fmt.Sprintf("IPAMClaim %s/%s deleted", a.Spec.Claim.Namespace, a.Spec.Claim.Name)
	}
	return free, fmt.Sprintf("pod %s gone", a.Spec.Pod)
}

// podIndex lists every pod (watch cache): live pods by namespace/name, and
// the addresses live pods list in their network-status annotation.
func (al *Allocator) podIndex(ctx context.Context) (map[string]*podInfo, map[netip.Addr]string, error) {
	var raw []json.RawMessage
	if err := al.retry(ctx, func() (err error) {
		raw, _, err = al.Client.List(ctx, "/api/v1/pods", kube.ListOptions{Cached: true})
		return
	}); err != nil {
		return nil, nil, apiError("listing pods", err)
	}
	pods := map[string]*podInfo{}
	inStatus := map[netip.Addr]string{}
	for _, r := range raw {
		var p podInfo
		if json.Unmarshal(r, &p) != nil {
			continue
		}
		key := p.Metadata.Namespace + "/" + p.Metadata.Name
		pods[key] = &p
		if !p.live("") {
			continue
		}
		var st []struct {
			IPs []string `json:"ips"`
		}
		if json.Unmarshal([]byte(p.Metadata.Annotations[networkStatusAnnotation]), &st) != nil {
			continue
		}
		for _, e := range st {
			for _, s := range e.IPs {
				// Bare addresses are the norm; prefixed ones (older
				// multinet, the spec's examples) count too.
				if a, _, err := parseAddrMaybePrefix(s); err == nil {
					inStatus[a] = key
				}
			}
		}
	}
	return pods, inStatus, nil
}

const networkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"

func parseAddrMaybePrefix(s string) (netip.Addr, int, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap(), p.Bits(), nil
	}
	a, err := netip.ParseAddr(s)
	return a.Unmap(), -1, err
}

// claimIndex lists every IPAMClaim (watch cache); known is false when
// they cannot be listed (then claim addresses are all kept).
func (al *Allocator) claimIndex(ctx context.Context) (map[string]*IPAMClaim, bool) {
	var raw []json.RawMessage
	err := al.retry(ctx, func() (err error) {
		raw, _, err = al.Client.List(ctx, "/apis/"+claimGroupVersion+"/"+claimResource, kube.ListOptions{Cached: true})
		return
	})
	if err != nil {
		al.log().Warn("reconcile: cannot list IPAMClaims; keeping every claim's addresses", "error", err)
		return nil, false
	}
	out := map[string]*IPAMClaim{}
	for _, r := range raw {
		var cl IPAMClaim
		if json.Unmarshal(r, &cl) == nil {
			out[cl.Metadata.Namespace+"/"+cl.Metadata.Name] = &cl
		}
	}
	return out, true
}

// Run reconciles every interval until ctx ends (the Deployment mode, or
// a goroutine of a node agent); each run's report goes to report.
func Run(ctx context.Context, c *kube.Client, interval time.Duration, o ReconcileOptions, report func(*ReconcileReport, error)) {
	for {
		rep, err := Reconcile(ctx, c, o)
		report(rep, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
