package multinet

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// BenchmarkPodAddDel: ADD and DEL of a pod with the cluster network plus
// one NAD through multinet (TLS to the apiserver, as in production), and
// the same two delegate chains run directly by the runtime. The overhead
// metrics are the medians' difference: what delegating costs (process
// start, API calls, cache, lock). api-calls/add counts one ADD's requests.
func BenchmarkPodAddDel(b *testing.B) {
	b.Run("sync-status", func(b *testing.B) { benchPodAddDel(b, false) })
	b.Run("async-status", func(b *testing.B) { benchPodAddDel(b, true) })
}

func benchPodAddDel(b *testing.B, async bool) {
	e := newEnv(b)
	e.opts["asyncNetworkStatus"] = async
	e.opts["logLevel"] = "warn"
	if testing.Verbose() {
		e.opts["logLevel"] = "debug"
	}
	blue := e.bridgeNAD("", 1, nil)
	e.nad("", "blue", blue)
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})

	// Count the API calls of one ADD through the counting proxy.
	e.proxy.take()
	e.mustAdd(p)
	calls := len(e.proxy.take())
	if async { // the detached writer's PATCH comes a little later
		time.Sleep(300 * time.Millisecond)
		calls += len(e.proxy.take())
	}
	e.mustDel(p)
	e.kubeconfig = e.tlsKube

	blue["name"] = "blue"
	raw, _ := json.Marshal(blue)
	nadList, err := spec.ParseConfList(raw)
	if err != nil {
		b.Fatal(err)
	}
	clusterList, err := runtime.LoadNetwork(e.dir+"/cluster", "cluster")
	if err != nil {
		b.Fatal(err)
	}
	conf := e.conf()
	ctx := context.Background()
	timeIt := func(f func() error) time.Duration {
		var d time.Duration
		if err := e.inHost(func() error {
			start := time.Now()
			err := f()
			d = time.Since(start)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		return d
	}
	var addT, delT, dAddT, dDelT []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.cid = "c" + randHex(8)
		rt := e.rt(p)
		addT = append(addT, timeIt(func() error { _, err := e.cni.AddNetworkList(ctx, conf, rt); return err }))
		delT = append(delT, timeIt(func() error { return e.cni.DelNetworkList(ctx, conf, rt) }))

		// The same delegates, run directly.
		rt0, rt1 := *rt, *rt
		rt0.ContainerID, rt1.ContainerID = "d"+p.cid, "d"+p.cid
		rt1.IfName = "net1"
		dAddT = append(dAddT, timeIt(func() error {
			if _, err := e.cni.AddNetworkList(ctx, clusterList, &rt0); err != nil {
				return err
			}
			_, err := e.cni.AddNetworkList(ctx, nadList, &rt1)
			return err
		}))
		dDelT = append(dDelT, timeIt(func() error {
			if err := e.cni.DelNetworkList(ctx, nadList, &rt1); err != nil {
				return err
			}
			return e.cni.DelNetworkList(ctx, clusterList, &rt0)
		}))
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(median(addT)), "add-ms")
	b.ReportMetric(ms(median(delT)), "del-ms")
	b.ReportMetric(ms(median(dAddT)), "delegates-add-ms")
	b.ReportMetric(ms(median(dDelT)), "delegates-del-ms")
	b.ReportMetric(ms(median(addT)-median(dAddT)), "overhead-add-ms")
	b.ReportMetric(ms(median(delT)-median(dDelT)), "overhead-del-ms")
	b.ReportMetric(float64(calls), "api-calls/add")
	b.ReportMetric(0, "ns/op")
	if testing.Verbose() {
		lines := strings.Split(strings.TrimSpace(e.log()), "\n")
		b.Log(strings.Join(lines[max(0, len(lines)-12):], "\n"))
	}
	if l := e.leases(); len(l) != 0 {
		b.Errorf("leases left: %v", l)
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
