package clusteripam

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/patchbay-cni/patchbay/multinet/kube"
	"github.com/patchbay-cni/patchbay/spec"
)

// Del frees what the attachment holds: its addresses are deleted, except
// an IPAMClaim's, which are only unbound (the claim keeps them for its
// next pod) unless the claim is gone. Nothing to free is not an error.
//
// With prev (the cached ADD result) and a valid configuration the
// allocations are read by name. Without (a DEL after a failed ADD,
// containerd's repeated DELs), or when one named is not the attachment's,
// they are looked up twice at once: by the attachment label in the
// apiserver's watch cache (in memory, whatever the number of allocations)
// and by name from etcd for the addresses the ADD most likely took (its
// first hashed candidates, requested and static addresses: an allocation
// made a moment ago is found even before the watch cache has it). Without
// a valid configuration the label is listed from etcd (a read of every
// allocation).
func (al *Allocator) Del(ctx context.Context, c *Config, at Attachment, prev *spec.Result) error {
	found := map[string]*Allocation{}
	complete := c != nil && prev != nil && len(prev.IPs) > 0
	if complete {
		for _, ip := range prev.IPs {
			if ip == nil {
				continue
			}
			r := c.rangeOf(ip.Address.Addr())
			if r == nil {
				continue // a static address outside the ranges
			}
			name := ObjectName(Scope(c.NetworkName, c.Overlapping, r.Prefix), ip.Address.Addr())
			a, err := al.holding(ctx, name, at)
			if err != nil {
				return err
			}
			if a == nil {
				complete = false // not where its address says: look it up
				continue
			}
			found[name] = a
		}
		complete = complete && len(found) >= len(c.Ranges)
	}
	if !complete {
		more, err := al.lookup(ctx, c, at)
		if err != nil {
			return err
		}
		for _, a := range more {
			found[a.Metadata.Name] = a
		}
	}
	var errs []error
	for _, a := range found {
		if err := al.release(ctx, a, at); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// lookup finds the attachment's allocations without knowing their
// addresses (see Del).
func (al *Allocator) lookup(ctx context.Context, c *Config, at Attachment) ([]*Allocation, error) {
	selector := LabelAttachment + "=" + at.Key()
	if c == nil {
		var allocs []*Allocation
		if err := al.retry(ctx, func() (err error) { allocs, err = al.store().list(ctx, selector, false); return }); err != nil {
			return nil, apiError("listing the allocations of the attachment", err)
		}
		return slices.DeleteFunc(allocs, func(a *Allocation) bool { return !at.holds(a) }), nil
	}
	names := c.likelyNames(at)
	byName := make([]*Allocation, len(names))
	errs := make([]error, len(names)+1)
	var listed []*Allocation
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			err := al.retry(ctx, func() (err error) { byName[i], err = al.store().get(ctx, name, false); return })
			if err != nil && !kube.IsNotFound(err) {
				errs[i] = apiError("reading IPAllocation "+name, err)
			}
		})
	}
	wg.Go(func() {
		if err := al.retry(ctx, func() (err error) { listed, err = al.store().list(ctx, selector, true); return }); err != nil {
			errs[len(names)] = apiError("listing the allocations of the attachment", err)
		}
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []*Allocation
	for _, a := range append(byName, listed...) {
		if a != nil && at.holds(a) && !slices.ContainsFunc(out, func(o *Allocation) bool { return o.Metadata.Name == a.Metadata.Name }) {
			out = append(out, a)
		}
	}
	return out, nil
}

// holding returns the allocation of that name if the attachment holds it
// (a watch-cache read, confirmed from etcd when it says otherwise).
func (al *Allocator) holding(ctx context.Context, name string, at Attachment) (*Allocation, error) {
	for _, cached := range []bool{true, false} {
		var a *Allocation
		err := al.retry(ctx, func() (err error) { a, err = al.store().get(ctx, name, cached); return })
		if err != nil && !kube.IsNotFound(err) {
			return nil, apiError("reading IPAllocation "+name, err)
		}
		if err == nil && at.holds(a) {
			return a, nil
		}
	}
	return nil, nil
}

// release frees one allocation the attachment holds. It is conditional on
// the object as read; when that changed, it is read again and released
// only if still held.
func (al *Allocator) release(ctx context.Context, a *Allocation, at Attachment) error {
	st := al.store()
	for range 5 {
		keep := a.Spec.Claim != nil && al.claimExists(ctx, a.Spec.Claim)
		err := al.retry(ctx, func() error {
			if keep {
				unbind(a)
				_, err := st.update(ctx, a)
				return err
			}
			return st.remove(ctx, a)
		})
		if err == nil || kube.IsNotFound(err) {
			return nil
		}
		if !kube.IsConflict(err) {
			return apiError("freeing address "+a.Spec.Address, err)
		}
		// Changed since read (or an unanswered attempt went through).
		if a, err = al.holding(ctx, a.Metadata.Name, at); err != nil || a == nil {
			return err
		}
	}
	return spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: IPAllocation %s kept changing while it was freed; try again", a.Metadata.Name)
}

// unbind leaves a claim's allocation without an attachment.
func unbind(a *Allocation) {
	a.Spec.Network, a.Spec.ContainerID, a.Spec.IfName, a.Spec.Node, a.Spec.Pod = "", "", "", "", nil
	delete(a.Metadata.Labels, LabelAttachment)
	delete(a.Metadata.Labels, LabelNode)
}

// claimExists reports whether the claim (same UID) still exists. When in
// doubt (an API error) it says yes: the address is then kept, not freed.
func (al *Allocator) claimExists(ctx context.Context, ref *ClaimRef) bool {
	cl, err := al.getClaim(ctx, ref.Namespace, ref.Name, true)
	if kube.IsNotFound(err) {
		return false
	}
	return err != nil || cl.Metadata.UID == ref.UID
}

// Check verifies that every range has its address in the previous result
// and that the attachment holds it.
func (al *Allocator) Check(ctx context.Context, c *Config, at Attachment, prev *spec.Result) error {
	if prev == nil {
		return spec.Errorf(spec.ErrInvalidNetworkConfig, "cluster-ipam: CHECK needs prevResult")
	}
	for _, r := range c.Ranges {
		var addr netip.Addr
		for _, ip := range prev.IPs {
			if ip != nil && r.Requestable(ip.Address.Addr()) {
				addr = ip.Address.Addr()
				break
			}
		}
		if !addr.IsValid() {
			return spec.Errorf(spec.ErrInternal, "cluster-ipam: CHECK: the result has no address of range %s", r)
		}
		name := ObjectName(Scope(c.NetworkName, c.Overlapping, r.Prefix), addr)
		var a *Allocation
		err := al.retry(ctx, func() (err error) { a, err = al.store().get(ctx, name, false); return })
		switch {
		case kube.IsNotFound(err):
			return spec.Errorf(spec.ErrInternal, "cluster-ipam: CHECK: address %s is not allocated (no IPAllocation %s)", addr, name)
		case err != nil:
			return apiError("reading IPAllocation "+name, err)
		case !at.holds(a):
			return spec.Errorf(spec.ErrInternal, "cluster-ipam: CHECK: address %s is allocated to %s, not to this attachment", addr, a.holder())
		}
	}
	return nil
}

// SweepNode frees the allocations this node's attachments of network hold
// that are not in valid (CNI GC's cni.dev/valid-attachments): the runtime
// says they are gone. It returns how many it freed.
func (al *Allocator) SweepNode(ctx context.Context, network, node string, valid []spec.Attachment) (int, error) {
	keep := map[string]bool{}
	for _, v := range valid {
		keep[v.ContainerID+"\x00"+v.IfName] = true
	}
	var allocs []*Allocation
	if err := al.retry(ctx, func() (err error) { allocs, err = al.store().list(ctx, LabelNode+"="+nodeLabel(node), false); return }); err != nil {
		return 0, apiError("listing the allocations of node "+node, err)
	}
	n := 0
	var errs []string
	for _, a := range allocs {
		if a.Spec.Node != node || a.Spec.Network != network || !a.bound() || keep[a.Spec.ContainerID+"\x00"+a.Spec.IfName] {
			continue
		}
		at := Attachment{Network: a.Spec.Network, ContainerID: a.Spec.ContainerID, IfName: a.Spec.IfName}
		if err := al.release(ctx, a, at); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		al.log().Info("GC: freed the address of a gone attachment", "address", a.Spec.Address, "container", a.Spec.ContainerID, "ifname", a.Spec.IfName)
		n++
	}
	if len(errs) > 0 {
		return n, spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: GC: %s", strings.Join(errs, "; "))
	}
	return n, nil
}
