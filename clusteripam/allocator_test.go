package clusteripam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// ADD allocates one address per range, recorded in an IPAllocation naming
// the attachment; a repeated ADD gets the same addresses; DEL frees them,
// by name (prevResult) or by label (none), and a second DEL is a no-op.
func TestAddDelDualStack(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	c := w.config(map[string]any{"range": "10.40.0.0/24", "gateway": "10.40.0.1",
		"ipRanges": []any{map[string]any{"range": "fd40::/64"}}}, "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p1;K8S_POD_UID=u1", nil)
	at := attachment("node-a")
	at.Pod = c.Pod
	got, err := w.al.Add(ctx, c, at)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].Address.Addr().Is4() || got[0].Address.Bits() != 24 || got[0].Gateway.String() != "10.40.0.1" ||
		!got[1].Address.Addr().Is6() || got[1].Address.Bits() != 64 || got[1].Gateway.IsValid() {
		t.Fatalf("ADD = %+v", got)
	}
	if got[0].Address.Addr().String() == "10.40.0.1" {
		t.Errorf("the gateway was handed out")
	}
	allocs := w.wantAllocations(2, "after ADD")
	for _, a := range allocs {
		if !at.holds(a) || a.Spec.Node != "node-a" || a.Spec.Pod == nil || *a.Spec.Pod != c.Pod || a.Metadata.Labels[LabelAttachment] != at.Key() {
			t.Errorf("allocation %+v", a)
		}
	}
	again, err := w.al.Add(ctx, c, at)
	if err != nil || !slices.Equal(addrs(again), addrs(got)) {
		t.Errorf("repeated ADD = %v, %v; want the same addresses %v", addrs(again), err, addrs(got))
	}
	if err := w.al.Check(ctx, c, at, result(got)); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	other := attachment("node-a")
	if err := w.al.Check(ctx, c, other, result(got)); err == nil || !strings.Contains(err.Error(), "not to this attachment") {
		t.Errorf("CHECK of another attachment: %v", err)
	}
	if err := w.al.Del(ctx, c, at, result(got)); err != nil {
		t.Fatal(err)
	}
	w.wantAllocations(0, "after DEL")
	if err := w.al.Check(ctx, c, at, result(got)); err == nil || !strings.Contains(err.Error(), "is not allocated") {
		t.Errorf("CHECK after DEL: %v", err)
	}
	if err := w.al.Del(ctx, c, at, result(got)); err != nil {
		t.Errorf("second DEL: %v", err)
	}

	// Without prevResult, and without a valid configuration.
	if _, err := w.al.Add(ctx, c, at); err != nil {
		t.Fatal(err)
	}
	if err := w.al.Del(ctx, nil, at, nil); err != nil {
		t.Fatal(err)
	}
	w.wantAllocations(0, "after DEL by label")
}

// Exhaustion is code 11 naming the range; exclusions and the gateway are
// never handed out; freeing one address makes room again.
func TestExhaustionAndExclude(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	// 10.41.0.0/29: .1-.6 usable; .1 gateway, .4 excluded: 4 addresses.
	c := w.config(map[string]any{"range": "10.41.0.0/29", "gateway": "10.41.0.1", "exclude": []any{"10.41.0.4/32"}}, "", nil)
	var ats []Attachment
	seen := map[netip.Addr]bool{}
	for i := range 4 {
		at := attachment("n")
		got, err := w.al.Add(ctx, c, at)
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		a := got[0].Address.Addr()
		if seen[a] || a.String() == "10.41.0.1" || a.String() == "10.41.0.4" {
			t.Fatalf("ADD %d got %s (seen %v)", i, a, seen)
		}
		seen[a] = true
		ats = append(ats, at)
	}
	_, err := w.al.Add(ctx, c, attachment("n"))
	ce := spec.AsError(err, 0)
	if ce == nil || ce.Code != spec.ErrTryAgainLater || !strings.Contains(ce.Msg, "no free address in range 10.41.0.0/29 (10.41.0.1-10.41.0.6)") ||
		!strings.Contains(ce.Msg, "all 4 usable addresses are allocated") {
		t.Fatalf("ADD in a full range: %v", err)
	}
	w.wantAllocations(4, "after the refused ADD")
	if err := w.al.Del(ctx, c, ats[2], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.al.Add(ctx, c, attachment("n")); err != nil {
		t.Errorf("ADD after a DEL: %v", err)
	}
}

// Requested addresses (runtimeConfig.ips) replace the dynamic one of their
// range and may be excluded ones; a taken one is refused with the holder
// named; static "addresses" in a range are reserved, outside returned.
func TestRequestedAndStatic(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	ipam := func() map[string]any {
		return map[string]any{"range": "10.42.0.0/24", "exclude": []any{"10.42.0.0/28"},
			"addresses": []any{map[string]any{"address": "10.42.0.200/24"}, map[string]any{"address": "192.0.2.9/24", "gateway": "192.0.2.1"}}}
	}
	c := w.config(ipam(), "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=first", map[string]any{"runtimeConfig": map[string]any{"ips": []any{"10.42.0.5/24"}}})
	at := attachment("n")
	at.Pod = c.Pod
	got, err := w.al.Add(ctx, c, at)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.42.0.5/24", "10.42.0.200/24", "192.0.2.9/24"}; len(got) != 3 || got[0].Address.String() != want[0] ||
		got[1].Address.String() != want[1] || got[2].Address.String() != want[2] || got[2].Gateway.String() != "192.0.2.1" {
		t.Fatalf("ADD = %+v, want %v", got, want)
	}
	w.wantAllocations(2, "requested + static in range")
	c2 := w.config(ipam(), "", map[string]any{"args": map[string]any{"cni": map[string]any{"ips": []any{"10.42.0.5"}}}})
	_, err = w.al.Add(ctx, c2, attachment("n"))
	if err == nil || !strings.Contains(err.Error(), "args.cni.ips: address 10.42.0.5 of range 10.42.0.0/24 is already allocated to pod ns/first") {
		t.Fatalf("taken request: %v", err)
	}
	w.wantAllocations(2, "after the refused request (its static address rolled back)")
	if err := w.al.Del(ctx, c, at, result(got)); err != nil {
		t.Fatal(err)
	}
	w.wantAllocations(0, "after DEL")
}

// Two "nodes" allocate concurrently from one pool: no duplicate, no
// failure; then everything is freed concurrently.
func TestConcurrentNodes(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	c := w.config(map[string]any{"range": "10.43.0.0/24"}, "", nil)
	const per = 40
	var mu sync.Mutex
	owner := map[netip.Addr]string{}
	var ats []Attachment
	var errs []error
	var wg sync.WaitGroup
	for _, node := range []string{"node-a", "node-b"} {
		for range per {
			wg.Go(func() {
				at := attachment(node)
				got, err := w.al.Add(ctx, c, at)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				ats = append(ats, at)
				a := got[0].Address.Addr()
				if prev, dup := owner[a]; dup {
					errs = append(errs, fmt.Errorf("duplicate %s: %s and %s", a, prev, at.ContainerID))
				}
				owner[a] = at.ContainerID
			})
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	w.wantAllocations(2*per, "after the concurrent ADDs")
	for _, at := range ats {
		wg.Go(func() {
			if err := w.al.Del(ctx, c, at, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	w.wantAllocations(0, "after the concurrent DELs")
}

// A pool filled by concurrent ADDs to its last address, past its size:
// exactly size succeed, the rest get the exhaustion error.
func TestConcurrentExhaustion(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	c := w.config(map[string]any{"range": "10.44.0.0/28"}, "", nil) // 14 usable
	var mu sync.Mutex
	ok, full := 0, 0
	var other []error
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := w.al.Add(ctx, c, attachment("n"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case strings.Contains(err.Error(), "no free address"):
				full++
			default:
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	if ok != 14 || full != 6 || len(other) > 0 {
		t.Fatalf("%d allocated, %d refused as full, other errors %v; want 14 and 6", ok, full, other)
	}
	w.wantAllocations(14, "full pool")
}

// network_name separates address spaces; enable_overlapping_ranges false
// separates ranges of one network_name.
func TestScopes(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	req := map[string]any{"runtimeConfig": map[string]any{"ips": []any{"10.45.0.9"}}}
	c := w.config(map[string]any{"range": "10.45.0.0/24"}, "", req)
	if _, err := w.al.Add(ctx, c, attachment("n")); err != nil {
		t.Fatal(err)
	}
	// Overlapping range, same network_name: the address is taken.
	c2 := w.config(map[string]any{"range": "10.45.0.0/16"}, "", req)
	if _, err := w.al.Add(ctx, c2, attachment("n")); err == nil {
		t.Error("the same address in an overlapping range of the same network_name was handed out twice")
	}
	// The same, with overlapping-range protection off: a separate pool.
	c3 := w.config(map[string]any{"range": "10.45.0.0/16", "enable_overlapping_ranges": false}, "", req)
	if _, err := w.al.Add(ctx, c3, attachment("n")); err != nil {
		t.Errorf("enable_overlapping_ranges false: %v", err)
	}
	// Another network_name is another address space.
	w2 := *w
	w2.net = w.net + "-other"
	if _, err := w2.al.Add(ctx, w2.config(map[string]any{"range": "10.45.0.0/24"}, "", req), attachment("n")); err != nil {
		t.Errorf("another network_name: %v", err)
	}
}
