package clusteripam

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/patchbay-cni/patchbay/multinet/kube"
)

// BenchmarkStorageDesigns compares, on the real apiserver, the two ways to
// record allocations without a cluster-wide lock (README "Storage"):
//
//   - objects: one object per address, created if absent (cluster-ipam);
//   - block: all allocations of a node (or pool) in one object, updated
//     with optimistic concurrency (GET, add the entry, PUT with the
//     resourceVersion, again on 409), as per-node blocks do when the
//     node's pods start together.
//
// Each op (ns/op) is 50 concurrent allocations, each with its own client
// (connection), as 50 plugin processes would have.
//
//	go test -run XXX -bench StorageDesigns -benchtime 5x ./clusteripam/
func BenchmarkStorageDesigns(b *testing.B) {
	w := newWorld(b)
	const conc = 50
	clients := make([]*kube.Client, conc)
	for i := range clients {
		clients[i] = apiClient(b, w.c)
	}
	ctx := context.Background()
	b.Run("objects", func(b *testing.B) {
		round := 0
		for b.Loop() {
			round++
			var wg sync.WaitGroup
			for i := range conc {
				wg.Go(func() {
					a := &Allocation{Metadata: ObjectMeta{Name: fmt.Sprintf("design-%s-%d-%d", w.net, round, i)},
						Spec: AllocationSpec{Address: fmt.Sprintf("10.57.%d.%d", round%250, i), Range: "10.57.0.0/16", NetworkName: w.net}}
					if _, err := (store{clients[i]}).create(ctx, a); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
		}
		b.ReportMetric(0, "conflicts/allocation")
	})
	b.Run("block", func(b *testing.B) {
		var conflicts atomic.Int64
		round := 0
		for b.Loop() {
			round++
			name := fmt.Sprintf("design-block-%s-%d", w.net, round)
			block := &Allocation{Metadata: ObjectMeta{Name: name, Annotations: map[string]string{}},
				Spec: AllocationSpec{Address: "10.58.0.0", Range: "10.58.0.0/26"}}
			if _, err := (store{clients[0]}).create(ctx, block); err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			for i := range conc {
				wg.Go(func() {
					st := store{clients[i]}
					for {
						cur, err := st.get(ctx, name, false)
						if err != nil {
							b.Error(err)
							return
						}
						if cur.Metadata.Annotations == nil {
							cur.Metadata.Annotations = map[string]string{}
						}
						cur.Metadata.Annotations[fmt.Sprintf("a.%d", i)] = fmt.Sprintf("container-%d", i)
						if _, err = st.update(ctx, cur); err == nil {
							return
						}
						if !kube.IsConflict(err) {
							b.Error(err)
							return
						}
						conflicts.Add(1)
					}
				})
			}
			wg.Wait()
		}
		b.ReportMetric(float64(conflicts.Load())/float64(round*conc), "conflicts/allocation")
	})
}
