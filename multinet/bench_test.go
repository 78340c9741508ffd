package multinet

import (
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
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
	e.opts["logLevel"] = "debug" // inProcess reads the timings
	blue := e.bridgeNAD("", 1, nil)
	e.nad("", "blue", blue)
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})

	// Count the API calls of one ADD through the counting proxy.
	e.proxy.take()
	e.mustAdd(p)
	// With asyncNetworkStatus the detached writer's PATCH may come a
	// little after ADD returned: collect until it is seen.
	var seen []string
	for i := 0; i < 250 && !slices.ContainsFunc(seen, func(c string) bool { return strings.HasPrefix(c, "PATCH ") }); i++ {
		if i > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		seen = append(seen, e.proxy.take()...)
	}
	calls := len(seen)
	b.Logf("API calls of one ADD: %q", seen)
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
	if in, dl := inProcess(e.log()); len(in) > 0 {
		b.ReportMetric(ms(median(in)), "inproc-overhead-add-ms")
		b.ReportMetric(ms(median(dl)), "delegates-in-multinet-add-ms")
	}
	// The floor any exec'd plugin pays: start multinet for VERSION.
	var execT []time.Duration
	for i := 0; i < 20; i++ {
		cmd := exec.Command(e.binDir + "/multinet")
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		cmd.Stdin = strings.NewReader(`{"cniVersion":"1.1.0"}`)
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		execT = append(execT, time.Since(start))
	}
	b.ReportMetric(ms(median(execT)), "exec-floor-ms")
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

var doneRE = regexp.MustCompile(`msg="ADD done".* delegates_us=(\d+) total_us=(\d+)`)

// inProcess returns, per ADD logged, multinet's own time minus its
// delegates' (from process start to the result), and the delegates' time.
func inProcess(log string) (overhead, delegates []time.Duration) {
	for _, m := range doneRE.FindAllStringSubmatch(log, -1) {
		d, _ := strconv.Atoi(m[1])
		t, _ := strconv.Atoi(m[2])
		overhead = append(overhead, time.Duration(t-d)*time.Microsecond)
		delegates = append(delegates, time.Duration(d)*time.Microsecond)
	}
	return overhead, delegates
}
