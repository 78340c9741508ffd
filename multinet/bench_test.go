package multinet

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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
//
// MULTINET_BENCH_ALT="name=/path/to/multinet ..." runs other multinet
// binaries (say the previous version, built with `make build` from its
// tree) in the same loop, one ADD and DEL each per iteration beside this
// tree's: on a machine shared with other jobs only a comparison
// interleaved per iteration means anything. Each reports <name>-add-ms,
// <name>-del-ms and, when its debug log has them, <name>-cluster-done-ms.
//
// The thick-* variants run the same through multinet-shim and "multinet
// daemon" (started once per variant): the in-process overhead is then the
// daemon's time from the shim's start to the result minus the delegates'.
func BenchmarkPodAddDel(b *testing.B) {
	b.Run("sync-status", func(b *testing.B) { benchPodAddDel(b, false, false) })
	b.Run("async-status", func(b *testing.B) { benchPodAddDel(b, true, false) })
	b.Run("thick-sync-status", func(b *testing.B) { benchPodAddDel(b, false, true) })
	b.Run("thick-async-status", func(b *testing.B) { benchPodAddDel(b, true, true) })
}

func benchPodAddDel(b *testing.B, async, thick bool) {
	e := newEnv(b)
	e.opts["asyncNetworkStatus"] = async
	e.opts["logLevel"] = "debug" // inProcess reads the timings
	blue := e.bridgeNAD("", 1, nil)
	e.nad("", "blue", blue)
	if thick {
		e.nodeName = "node-" + randHex(3)
	}
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})

	var calls int
	if thick {
		d := e.startDaemon(nil)
		time.Sleep(200 * time.Millisecond) // the informers have the pod and the NAD
		requests := func() float64 {
			return d.metric("multinet_api_request_duration_seconds_count") -
				d.metric("multinet_api_request_duration_seconds_count", `method="LIST"`)
		}
		before := requests()
		e.mustAdd(p)
		for i := 0; i < 250 && requests() == before; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		calls = int(requests() - before)
	} else {
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
		calls = len(seen)
		b.Logf("API calls of one ADD: %q", seen)
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
	var alts []*benchAlt
	if !thick {
		alts = benchAlternatives(b, e)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, alt := range alts {
			p.cid = "c" + randHex(8)
			rt := e.rt(p)
			alt.add = append(alt.add, timeIt(func() error { _, err := alt.cni.AddNetworkList(ctx, alt.conf, rt); return err }))
			alt.del = append(alt.del, timeIt(func() error { return alt.cni.DelNetworkList(ctx, alt.conf, rt) }))
		}
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
	if sent, received := daemonReceived(e.log()); len(received) > 0 {
		b.ReportMetric(ms(median(sent)), "shim-sent-ms")
		b.ReportMetric(ms(median(received)), "daemon-received-ms")
	}
	if pol := policyTimes(e.log()); len(pol) > 0 {
		b.ReportMetric(float64(median(pol).Microseconds()), "policy-check-us")
	}
	if reads, cluster := phases(e.log()); len(cluster) > 0 {
		b.ReportMetric(ms(median(reads)), "reads-done-ms")
		b.ReportMetric(ms(median(cluster)), "cluster-done-ms")
	}
	for _, alt := range alts {
		b.ReportMetric(ms(median(alt.add)), alt.name+"-add-ms")
		b.ReportMetric(ms(median(alt.del)), alt.name+"-del-ms")
		if log, err := os.ReadFile(alt.log); err == nil {
			if _, cluster := phases(string(log)); len(cluster) > 0 {
				b.ReportMetric(ms(median(cluster)), alt.name+"-cluster-done-ms")
			}
		}
	}
	// The floor any exec'd plugin pays: start multinet (the shim) for VERSION.
	plugin := "/multinet"
	if thick {
		plugin = "/multinet-shim"
	}
	var execT []time.Duration
	for i := 0; i < 20; i++ {
		cmd := exec.Command(e.binDir + plugin)
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

// benchAlt is another multinet binary run beside this tree's.
type benchAlt struct {
	name, log string
	cni       *runtime.CNI
	conf      *spec.ConfList
	add, del  []time.Duration
}

// benchAlternatives reads MULTINET_BENCH_ALT: each alternative gets a bin
// directory like e.binDir with its multinet, and its own log file.
func benchAlternatives(b *testing.B, e *env) []*benchAlt {
	var alts []*benchAlt
	for _, kv := range strings.Fields(os.Getenv("MULTINET_BENCH_ALT")) {
		name, path, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			b.Fatalf("MULTINET_BENCH_ALT: %q is not name=/path/to/multinet", kv)
		}
		dir := b.TempDir()
		ents, err := os.ReadDir(e.binDir)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range ents {
			target, _ := os.Readlink(filepath.Join(e.binDir, d.Name()))
			if d.Name() == "multinet" {
				target = path
			}
			if err := os.Symlink(target, filepath.Join(dir, d.Name())); err != nil {
				b.Fatal(err)
			}
		}
		alt := &benchAlt{name: name, log: filepath.Join(dir, "multinet.log"), cni: &runtime.CNI{Path: []string{dir}, CacheDir: e.cni.CacheDir}}
		e.opts["logFile"] = alt.log
		alt.conf = e.conf()
		delete(e.opts, "logFile")
		alts = append(alts, alt)
	}
	return alts
}

var phaseRE = regexp.MustCompile(`msg="ADD done".* reads_done_us=(\d+) cluster_done_us=(\d+)`)

// phases returns, per ADD logged, when (from process start) the API reads
// were done and when the cluster network was attached.
func phases(log string) (reads, cluster []time.Duration) {
	for _, m := range phaseRE.FindAllStringSubmatch(log, -1) {
		r, _ := strconv.Atoi(m[1])
		c, _ := strconv.Atoi(m[2])
		reads = append(reads, time.Duration(r)*time.Microsecond)
		cluster = append(cluster, time.Duration(c)*time.Microsecond)
	}
	return reads, cluster
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

var policyRE = regexp.MustCompile(`msg="ADD done".* policy_us=(\d+)`)

// policyTimes returns, per ADD logged, what the NAD policy check took
// (reading the policy and checking the pod's NADs).
func policyTimes(log string) []time.Duration {
	var out []time.Duration
	for _, m := range policyRE.FindAllStringSubmatch(log, -1) {
		us, _ := strconv.Atoi(m[1])
		out = append(out, time.Duration(us)*time.Microsecond)
	}
	return out
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

var receivedRE = regexp.MustCompile(`msg=request .*verb=ADD .* sent_us=(\d+) received_us=(\d+)`)

// daemonReceived returns, per ADD the daemon logged, when (from the shim's
// start) the shim sent the request and the daemon had read it.
func daemonReceived(log string) (sent, received []time.Duration) {
	for _, m := range receivedRE.FindAllStringSubmatch(log, -1) {
		s, _ := strconv.Atoi(m[1])
		r, _ := strconv.Atoi(m[2])
		sent = append(sent, time.Duration(s)*time.Microsecond)
		received = append(received, time.Duration(r)*time.Microsecond)
	}
	return sent, received
}
