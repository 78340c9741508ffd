package clusteripam

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/kube"
	"github.com/patchbay-cni/patchbay/spec"
)

// Allocator hands out, checks and frees addresses for CNI invocations.
// Every decision is made by the apiserver: an address is allocated by
// creating its IPAllocation (refused when the name exists), freed by
// deleting it with preconditions (refused when it changed since it was
// read). No lock is held anywhere, so a process killed at any point leaves
// either no object or a complete one naming its holder, which DEL, GC or
// Reconcile removes.
type Allocator struct {
	Client *kube.Client
	Log    *slog.Logger
	// RetryFor bounds the retries of one API call that got no answer or
	// a "try later" (apiserver restart, etcd leader change); 0: 20 s.
	RetryFor time.Duration
}

func (al *Allocator) store() store { return store{al.Client} }

func (al *Allocator) log() *slog.Logger {
	if al.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return al.Log
}

// Assigned is one address of an ADD result.
type Assigned struct {
	Range   *Range // nil for a static address outside every range
	Address netip.Prefix
	Gateway netip.Addr
}

// allocError is an allocation failure with the IPAMClaim condition reason
// it maps to (upstream reasons: SubnetExhausted, IPAddressConflict).
type allocError struct {
	reason string
	err    *spec.Error
}

func (e *allocError) Error() string { return e.err.Error() }
func (e *allocError) Unwrap() error { return e.err }

const (
	reasonExhausted = "SubnetExhausted"
	reasonConflict  = "IPAddressConflict"
)

// retry runs f until it succeeds, fails for good, or the retry time is
// spent. Only transient failures are retried; a request that got no answer
// may have been carried out, so callers retry idempotent steps only (a
// create of the same name, whose "already exists" they check).
func (al *Allocator) retry(ctx context.Context, f func() error) error {
	limit := al.RetryFor
	if limit <= 0 {
		limit = 20 * time.Second
	}
	deadline := time.Now().Add(limit)
	backoff := 20 * time.Millisecond
	for {
		err := f()
		if err == nil || !kube.IsTransient(err) || ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			return err
		}
		al.log().Debug("retrying after a transient API error", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// newAllocation is the object holding addr of r for the attachment (and
// the claim, if any).
func (c *Config) newAllocation(r *Range, addr netip.Addr, at Attachment, claim *ClaimRef) *Allocation {
	scope := Scope(c.NetworkName, c.Overlapping, r.Prefix)
	a := &Allocation{
		Metadata: ObjectMeta{Name: ObjectName(scope, addr), Labels: map[string]string{LabelScope: scopeLabel(scope)}},
		Spec:     AllocationSpec{Address: addr.String(), Range: r.Prefix.String(), NetworkName: c.NetworkName, Claim: claim},
	}
	bind(a, at)
	if claim != nil {
		a.Metadata.Labels[LabelClaim] = claim.UID
	}
	return a
}

// bind makes at the holder of a.
func bind(a *Allocation, at Attachment) {
	a.Spec.Network, a.Spec.ContainerID, a.Spec.IfName, a.Spec.Node = at.Network, at.ContainerID, at.IfName, at.Node
	a.Spec.Pod = nil
	if at.Pod.Name != "" {
		p := at.Pod
		a.Spec.Pod = &p
	}
	if a.Metadata.Labels == nil {
		a.Metadata.Labels = map[string]string{}
	}
	a.Metadata.Labels[LabelAttachment] = at.Key()
	a.Metadata.Labels[LabelNode] = nodeLabel(at.Node)
}

// take creates want. If its name is taken, it returns the holder instead;
// an allocation the attachment already holds (a repeated ADD, or a create
// whose answer was lost and which was sent again) is returned as got.
func (al *Allocator) take(ctx context.Context, want *Allocation, at Attachment) (got, holder *Allocation, err error) {
	st := al.store()
	for range 5 {
		err = al.retry(ctx, func() (err error) { got, err = st.create(ctx, want); return })
		if err == nil {
			return got, nil, nil
		}
		if !kube.IsAlreadyExists(err) {
			return nil, nil, apiError("allocating "+want.Spec.Address, err)
		}
		var cur *Allocation
		err = al.retry(ctx, func() (err error) { cur, err = st.get(ctx, want.Metadata.Name, false); return })
		if kube.IsNotFound(err) {
			continue // freed meanwhile
		}
		if err != nil {
			return nil, nil, apiError("reading IPAllocation "+want.Metadata.Name, err)
		}
		if at.holds(cur) && claimUID(cur) == claimUID(want) {
			return cur, nil, nil
		}
		return nil, cur, nil
	}
	return nil, nil, spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: address %s kept being allocated and freed by others; try again", want.Spec.Address)
}

func claimUID(a *Allocation) string {
	if a.Spec.Claim == nil {
		return ""
	}
	return a.Spec.Claim.UID
}

// apiError turns an API failure into a CNI error naming what was done.
func apiError(doing string, err error) error {
	var se *kube.StatusError
	switch {
	case errors.As(err, &se) && se.Code == 404 && strings.Contains(se.Path, "/"+Resource):
		return spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: %s: the IPAllocation resource is not served: install deploy/crds/cluster-ipam.yaml (%v)", doing, err)
	case errors.As(err, &se) && (se.Code == 401 || se.Code == 403):
		return spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: %s: the credentials are refused; see deploy/cluster-ipam/rbac.yaml (%v)", doing, err)
	case kube.IsTransient(err):
		return spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: %s: Kubernetes API unavailable: %v", doing, err)
	}
	return spec.Errorf(spec.ErrInternal, "cluster-ipam: %s: %v", doing, err)
}

// Add allocates one address per range (the requested one where asked for)
// and reserves the static addresses inside a range. On failure nothing it
// allocated is left.
func (al *Allocator) Add(ctx context.Context, c *Config, at Attachment) ([]Assigned, error) {
	if c.Claim != "" {
		return al.addClaimed(ctx, c, at)
	}
	type job struct {
		r     *Range
		exact netip.Addr
		src   string
	}
	var jobs []job
	for _, r := range c.Ranges {
		j := job{r: r}
		for _, q := range c.Requested {
			if r.Requestable(q.Addr) {
				j.exact, j.src = q.Addr, q.Source
			}
		}
		jobs = append(jobs, j)
	}
	for i, s := range c.Static {
		if r := c.rangeOf(s.Address.Addr()); r != nil {
			jobs = append(jobs, job{r: r, exact: s.Address.Addr(), src: fmt.Sprintf("ipam.addresses[%d]", i)})
		}
	}
	got := make([]*Allocation, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			if j.exact.IsValid() {
				got[i], errs[i] = al.exact(ctx, c, j.r, j.exact, j.src, at, nil)
			} else {
				got[i], errs[i] = al.dynamic(ctx, c, j.r, at, nil)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		al.rollback(ctx, got)
		return nil, firstError(errs)
	}
	var out []Assigned
	for i, j := range jobs[:len(c.Ranges)] {
		out = append(out, assigned(j.r, got[i]))
	}
	for _, s := range c.Static {
		out = append(out, Assigned{Range: c.rangeOf(s.Address.Addr()), Address: s.Address, Gateway: s.Gateway})
	}
	return out, nil
}

func assigned(r *Range, a *Allocation) Assigned {
	addr := netip.MustParseAddr(a.Spec.Address)
	return Assigned{Range: r, Address: netip.PrefixFrom(addr, r.Prefix.Bits()), Gateway: r.Gateway}
}

func firstError(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// rollback frees what a failed ADD allocated (best effort: a DEL or the
// reconciler frees what is left).
func (al *Allocator) rollback(ctx context.Context, allocs []*Allocation) {
	for _, a := range allocs {
		if a == nil {
			continue
		}
		if err := al.retry(ctx, func() error { return al.store().remove(ctx, a) }); err != nil && !kube.IsNotFound(err) {
			al.log().Warn("rollback: could not free an address", "address", a.Spec.Address, "error", err)
		}
	}
}

// exact allocates one specific address.
func (al *Allocator) exact(ctx context.Context, c *Config, r *Range, addr netip.Addr, source string, at Attachment, claim *ClaimRef) (*Allocation, error) {
	got, holder, err := al.take(ctx, c.newAllocation(r, addr, at, claim), at)
	if err != nil {
		return nil, err
	}
	if holder != nil {
		return nil, &allocError{reasonConflict, spec.Errorf(spec.ErrInvalidNetworkConfig,
			"cluster-ipam: %s: address %s of range %s is already allocated to %s", source, addr, r.Prefix, holder.holder())}
	}
	return got, nil
}

// Probes before falling back to a listing of the pool: each costs one API
// write; with the pool half full, three in a row fail one time in eight.
const randomProbes = 3

// dynamic allocates a free address of r. Candidates are spread over the
// range by a hash of the attachment (concurrent ADDs rarely pick the same
// one, and a repeated ADD picks its own again); after randomProbes taken
// candidates it lists the pool and tries free addresses. The range is
// exhausted only when a quorum read of the pool shows every usable
// address allocated.
func (al *Allocator) dynamic(ctx context.Context, c *Config, r *Range, at Attachment, claim *ClaimRef) (*Allocation, error) {
	seed := func(parts ...string) []byte { return candidateSeed(at, r, parts...) }
	for k := range randomProbes {
		a := r.Candidate(seed(strconv.Itoa(k)))
		if c.reserved(a) {
			continue
		}
		got, _, err := al.take(ctx, c.newAllocation(r, a, at, claim), at)
		if err != nil || got != nil {
			return got, err
		}
	}
	scope := Scope(c.NetworkName, c.Overlapping, r.Prefix)
	for round := range 3 {
		var allocs []*Allocation
		err := al.retry(ctx, func() (err error) {
			allocs, err = al.store().list(ctx, LabelScope+"="+scopeLabel(scope), round == 0)
			return
		})
		if err != nil {
			return nil, apiError("listing the allocations of range "+r.Prefix.String(), err)
		}
		taken := map[netip.Addr]bool{}
		for _, a := range allocs {
			if addr, err := netip.ParseAddr(a.Spec.Address); err == nil && r.Usable(addr) {
				taken[addr] = true
			}
		}
		if big.NewInt(int64(len(taken))).Cmp(r.usable) >= 0 {
			if round == 0 {
				continue // the watch cache may be behind: ask etcd
			}
			return nil, &allocError{reasonExhausted, spec.Errorf(spec.ErrTryAgainLater,
				"cluster-ipam: no free address in range %s of network %q: all %s usable addresses are allocated", r, c.Network, r.usable)}
		}
		start := r.Candidate(seed("list", strconv.Itoa(round)))
		a, tries := start, 0
		for scanned := 0; tries < 8 && scanned < 1<<16; scanned++ {
			if !taken[a] && !c.reserved(a) {
				tries++
				got, _, err := al.take(ctx, c.newAllocation(r, a, at, claim), at)
				if err != nil || got != nil {
					return got, err
				}
				taken[a] = true
			}
			if a = r.Next(a); a == start {
				break
			}
		}
	}
	return nil, spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: range %s of network %q: every free address found was taken by a concurrent ADD; try again", r, c.Network)
}

// reserved reports an address this invocation allocates explicitly (a
// static or requested one), which the dynamic allocation must not take.
func (c *Config) reserved(a netip.Addr) bool {
	for _, s := range c.Static {
		if s.Address.Addr() == a {
			return true
		}
	}
	for _, q := range c.Requested {
		if q.Addr == a {
			return true
		}
	}
	return false
}

// candidateSeed is the hash that picks an attachment's candidates in r.
func candidateSeed(at Attachment, r *Range, parts ...string) []byte {
	h := sha256.Sum256([]byte(at.Key() + "\x00" + r.Prefix.String() + "\x00" + strings.Join(parts, "\x00")))
	return h[:16]
}

// likelyNames are the IPAllocations an ADD of the attachment most likely
// made: per range its requested or static address, and its first hashed
// candidates (in a pool less than half full, nearly always the first).
func (c *Config) likelyNames(at Attachment) []string {
	var names []string
	for _, r := range c.Ranges {
		scope := Scope(c.NetworkName, c.Overlapping, r.Prefix)
		for k := range randomProbes {
			names = append(names, ObjectName(scope, r.Candidate(candidateSeed(at, r, strconv.Itoa(k)))))
		}
		for _, q := range c.Requested {
			if r.Requestable(q.Addr) {
				names = append(names, ObjectName(scope, q.Addr))
			}
		}
		for _, s := range c.Static {
			if r.Requestable(s.Address.Addr()) {
				names = append(names, ObjectName(scope, s.Address.Addr()))
			}
		}
	}
	return names
}
