package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/patchbay-cni/patchbay/internal/kubetest"
	"github.com/patchbay-cni/patchbay/internal/netns"
	pbrt "github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// The cluster-IPAM section: cluster-ipam against whereabouts v0.9.4 (built
// by scripts/bench-deps.sh from the module proxy), both on one etcd +
// kube-apiserver started for the run (internal/kubetest), driven by our
// runtime in a host netns that reaches the apiserver through a relay on its
// 127.0.0.1 (TLS end to end). Both get the same bridge (ours) where a
// bridge is used.

// cipamOptions are the section's flags.
type cipamOptions struct {
	whereabouts string // directory with the whereabouts binary and crds/
	conc        int    // concurrent ADDs
	prefill     int    // allocations before the "full pool" runs
	pods, nets  int    // the many-networks workload (0: not run)
	steps       map[string]bool
}

type cipamImpl struct {
	key, label string
	typ        string // plugin type
	bridge     string // its bridge's name (one host netns for both)
	host       *host
	// ctrPath is the CNI_NETNS of IPAM-alone calls: a netns of its own (the
	// reference SDK refuses the plugin's own netns).
	ctrPath    string
	kubeconfig string
	flat       string
}

// ipam is the implementation's ipam dictionary for a range.
func (im *cipamImpl) ipam(rng string) map[string]any {
	m := map[string]any{"type": im.typ, "range": rng, "configuration_path": im.flat,
		"kubernetes": map[string]any{"kubeconfig": im.kubeconfig}}
	return m
}

// list is a network with the IPAM alone, or under our bridge.
func (im *cipamImpl) list(name, rng string, bridge bool) *spec.ConfList {
	p := map[string]any{"type": im.typ, "ipam": im.ipam(rng)}
	if bridge {
		p = map[string]any{"type": "bridge", "bridge": im.bridge, "isGateway": true, "ipam": im.ipam(rng)}
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": cniVersion, "name": name, "plugins": []any{p}})
	return mustList(string(b))
}

// cipamSection measures and returns the section's table (Markdown).
func (e *env) cipamSection(ctx context.Context, o cipamOptions, out io.Writer) error {
	wbBin := filepath.Join(o.whereabouts, "whereabouts")
	if _, err := os.Stat(wbBin); err != nil {
		return fmt.Errorf("whereabouts v0.9.4 not found (%v): scripts/bench-deps.sh builds it", err)
	}
	dir := filepath.Join(e.work, "cipam")
	c, err := kubetest.StartIn(dir)
	if err != nil {
		return err
	}
	defer c.Stop()
	ours, _ := filepath.Glob("deploy/crds/*.yaml")
	theirs, _ := filepath.Glob(filepath.Join(o.whereabouts, "crds", "*.yaml"))
	if len(ours) == 0 || len(theirs) == 0 {
		return fmt.Errorf("CRDs missing: deploy/crds (run from the repository root) or %s/crds", o.whereabouts)
	}
	if err := c.InstallCRDs(append(ours, theirs...)...); err != nil {
		return err
	}
	hostName, hostPath, err := e.ns.add("h", true)
	if err != nil {
		return err
	}
	var ln net.Listener
	if err := netns.Do(hostPath, func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return }); err != nil {
		return err
	}
	defer ln.Close()
	c.Relay(ln)
	var impls []*cipamImpl
	for _, im := range []struct{ key, label, typ, bin string }{
		{"ours", "cluster-ipam", "cluster-ipam", filepath.Join(e.impls[0].dir, "cluster-ipam")},
		{"wb", "whereabouts v0.9.4", "whereabouts", wbBin},
	} {
		d := filepath.Join(dir, im.key)
		bin := filepath.Join(d, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			return err
		}
		for typ, src := range map[string]string{im.typ: im.bin, "bridge": filepath.Join(e.impls[0].dir, "bridge")} {
			if err := os.Symlink(src, filepath.Join(bin, typ)); err != nil {
				return err
			}
		}
		_, ctrPath, err := e.ns.add("c", false)
		if err != nil {
			return err
		}
		ci := &cipamImpl{key: im.key, label: im.label, typ: im.typ, bridge: "pbc-" + im.key, ctrPath: ctrPath,
			host:       &host{name: hostName, path: hostPath, cni: &pbrt.CNI{Path: []string{bin}, CacheDir: filepath.Join(d, "cache"), Timeout: 5 * time.Minute}},
			kubeconfig: filepath.Join(d, "kubeconfig"), flat: filepath.Join(d, "flat.conf")}
		if err := writeKubeconfig(c, ci.kubeconfig, "https://"+ln.Addr().String()); err != nil {
			return err
		}
		flat, _ := json.Marshal(map[string]any{"datastore": "kubernetes", "kubernetes": map[string]any{"kubeconfig": ci.kubeconfig}, "node_name": "bench-node"})
		if err := os.WriteFile(ci.flat, flat, 0o600); err != nil {
			return err
		}
		impls = append(impls, ci)
	}
	s := &cipamRun{e: e, c: c, impls: impls, o: o}
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"floor", s.floor}, {"single", s.single}, {"concurrent", s.concurrent}, {"full", s.full}, {"many", s.many},
	}
	for _, st := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(o.steps) > 0 && !o.steps[st.name] {
			continue
		}
		t0 := time.Now()
		fmt.Fprintf(os.Stderr, "[%s", st.name)
		if err := st.f(ctx); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		fmt.Fprintf(os.Stderr, " %.0fs]", time.Since(t0).Seconds())
	}
	s.notes = append(s.notes,
		"both on one etcd 3.4 + kube-apiserver "+kubetest.Version+" started for the run; the plugins reach it through a TCP relay in the host netns (TLS end to end); times are of our runtime's call (plugin execs and result cache included)",
		"targets (issue 10): ADD ≤ 0.25× whereabouts, 50 concurrent ADDs ≤ 0.1× its wall time, ADD with 1000 allocated ≤ 1.2× the empty pool, 0 duplicates and 0 addresses left")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "## cluster IPAM: cluster-ipam vs whereabouts v0.9.4 (medians of %d, interleaved)\n\n", e.n)
	writeMarkdown(out, []string{"workload", "cluster-ipam", "whereabouts v0.9.4", "cluster-ipam/whereabouts", "target", "result"}, s.rows, s.notes)
	return nil
}

type cipamRun struct {
	e     *env
	c     *kubetest.Cluster
	impls []*cipamImpl
	o     cipamOptions
	rows  [][]string
	notes []string
}

// timed is one measured value per implementation.
type timed [2]time.Duration

func (s *cipamRun) row(name string, v timed, maxRatio float64, target string) {
	r := []string{name, ms(v[0]), ms(v[1]), "-", "-", "-"}
	if v[0] > 0 && v[1] > 0 {
		r[3] = ratio(float64(v[0]), float64(v[1]))
	}
	if maxRatio > 0 {
		r[4] = target
		r[5] = verdict(v[0] > 0 && v[1] > 0 && float64(v[0])/float64(v[1]) <= maxRatio, v[0] > 0 && v[1] > 0)
	}
	s.rows = append(s.rows, r)
}

func (s *cipamRun) countRow(name string, n [2]int, of int) {
	s.rows = append(s.rows, []string{name, fmt.Sprintf("%d of %d", n[0], of), fmt.Sprintf("%d of %d", n[1], of), "-", "ours 0", verdict(n[0] == 0, true)})
}

// floor is the exec of each plugin for VERSION: the process start every
// invocation pays.
func (s *cipamRun) floor(ctx context.Context) error {
	var v timed
	for i, im := range s.impls {
		bin := filepath.Join(im.host.cni.Path[0], im.typ)
		var d []time.Duration
		for range s.e.n {
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = []string{"CNI_COMMAND=VERSION"}
			t0 := time.Now()
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s VERSION: %w", im.label, err)
			}
			d = append(d, time.Since(t0))
		}
		v[i], _ = median(d)
	}
	s.row("process start (exec for VERSION)", v, 0, "")
	return nil
}

// single: ADD and DEL of one attachment at a time, under our bridge (a
// fresh container netns each) and the IPAM plugin alone.
func (s *cipamRun) single(ctx context.Context) error {
	for _, bridge := range []bool{true, false} {
		var subs []*subject
		for i, im := range s.impls {
			rng := fmt.Sprintf("10.%d.0.0/16", 90+i)
			name := "pbb-cipam-alone"
			if bridge {
				rng, name = fmt.Sprintf("10.%d.0.0/16", 92+i), "pbb-cipam-bridge"
			}
			subs = append(subs, &subject{impl: &impl{key: im.key, label: im.label}, host: im.host, list: im.list(name, rng, bridge), podArgs: true})
		}
		if err := measure(ctx, s.e.ns, subs, s.e.n); err != nil {
			return err
		}
		for _, sub := range subs {
			if sub.unavailable != "" || sub.firstErr != nil {
				s.notes = append(s.notes, fmt.Sprintf("%s: %d failed, %s %v", sub.impl.label, sub.fails, sub.unavailable, sub.firstErr))
			}
		}
		label := "IPAM plugin alone"
		if bridge {
			label = "bridge + IPAM"
		}
		a, d := timed{}, timed{}
		for i, sub := range subs {
			a[i], _ = median(sub.adds)
			d[i], _ = median(sub.dels)
		}
		s.row("ADD "+label, a, 0.25, "≤ 0.25×")
		s.row("DEL "+label, d, 0, "")
	}
	return nil
}

// ipamAlone runs ADD (or DEL) of the IPAM plugin alone for container id.
func (im *cipamImpl) ipamAlone(ctx context.Context, l *spec.ConfList, id string, del bool) (*spec.Result, time.Duration, error) {
	rt := &pbrt.RuntimeConf{ContainerID: id, NetNS: im.ctrPath, IfName: "net1", Args: podArgs(id)}
	if del {
		d, err := im.host.del(ctx, l, rt)
		return nil, d, err
	}
	return im.host.add(ctx, l, rt)
}

// concurrent: o.conc ADDs at once per implementation (3 rounds), then
// their DELs at once; duplicates, failures and what is left.
func (s *cipamRun) concurrent(ctx context.Context) error {
	var addWall, delWall [2][]time.Duration
	var fails, dups, left [2]int
	attempts := 0
	for r := range 3 {
		attempts += s.o.conc
		for k := range s.impls {
			i := (r + k) % len(s.impls)
			im := s.impls[i]
			l := im.list("pbb-cipam-conc", fmt.Sprintf("10.%d.0.0/16", 94+i), false)
			res := make([]*spec.Result, s.o.conc)
			errs := make([]error, s.o.conc)
			addWall[i] = append(addWall[i], burst(s.o.conc, func(j int) {
				res[j], _, errs[j] = im.ipamAlone(ctx, l, fmt.Sprintf("conc-%d-%d", r, j), false)
			}))
			seen := map[netip.Addr]int{}
			for j := range res {
				if errs[j] != nil {
					fails[i]++
					if fails[i] == 1 {
						s.notes = append(s.notes, fmt.Sprintf("%d concurrent ADDs, %s: first failure: %s", s.o.conc, im.label, oneLine(errs[j].Error())))
					}
					continue
				}
				for _, ip := range res[j].IPs {
					seen[ip.Address.Addr()]++
				}
			}
			for _, n := range seen {
				dups[i] += n - 1
			}
			delWall[i] = append(delWall[i], burst(s.o.conc, func(j int) {
				_, _, errs[j] = im.ipamAlone(ctx, l, fmt.Sprintf("conc-%d-%d", r, j), true)
			}))
			n, err := s.allocated(i)
			if err != nil {
				return err
			}
			left[i] += n
		}
	}
	var a, d timed
	for i := range s.impls {
		a[i], _ = median(addWall[i])
		d[i], _ = median(delWall[i])
	}
	s.row(fmt.Sprintf("%d concurrent ADDs: wall time", s.o.conc), a, 0.1, "≤ 0.1×")
	s.countRow(fmt.Sprintf("%d concurrent ADDs: failed", s.o.conc), fails, attempts)
	s.countRow(fmt.Sprintf("%d concurrent ADDs: duplicate IPs", s.o.conc), dups, attempts)
	s.row(fmt.Sprintf("then %d concurrent DELs: wall time", s.o.conc), d, 0, "")
	s.countRow("then: addresses left allocated", left, attempts)
	s.notes = append(s.notes, "concurrent ADDs: IPAM plugin alone, 3 rounds, wall times are medians over rounds, counts totals")
	return nil
}

// full: ADD and DEL with o.prefill addresses allocated in the pool,
// interleaved with ADD and DEL in an empty pool of the same size, so the
// flatness ratio compares runs made under the same machine load.
func (s *cipamRun) full(ctx context.Context) error {
	var a, d, ae, d2 timed
	for i, im := range s.impls {
		full := im.list("pbb-cipam-full", fmt.Sprintf("10.%d.0.0/16", 96+i), false)
		empty := im.list("pbb-cipam-empty", fmt.Sprintf("10.%d.0.0/16", 98+i), false)
		if n := s.fill(ctx, im, full, "fill", s.o.prefill, 8, false); n > 0 {
			s.notes = append(s.notes, fmt.Sprintf("%s: %d of %d prefill ADDs failed", im.label, n, s.o.prefill))
		}
		var adds, dels, emptyAdds, dels2 []time.Duration
		fails := 0
		for j := range s.e.n {
			for k, l := range []*spec.ConfList{full, empty} {
				if j%2 == 1 {
					l = []*spec.ConfList{empty, full}[k]
				}
				id := fmt.Sprintf("full-%d", j)
				_, ta, err := im.ipamAlone(ctx, l, id, false)
				_, td, derr := im.ipamAlone(ctx, l, id, true)
				if err != nil || derr != nil {
					if fails++; fails == 1 {
						s.notes = append(s.notes, fmt.Sprintf("%s, ADD/DEL with %d allocated: first failure: %v %v", im.label, s.o.prefill, err, derr))
					}
					continue
				}
				if l == full {
					adds, dels = append(adds, ta), append(dels, td)
					// Again, as containerd's later DELs: no cached result.
					if _, td2, err := im.ipamAlone(ctx, l, id, true); err == nil {
						dels2 = append(dels2, td2)
					}
				} else {
					emptyAdds = append(emptyAdds, ta)
				}
			}
		}
		a[i], _ = median(adds)
		d[i], _ = median(dels)
		ae[i], _ = median(emptyAdds)
		d2[i], _ = median(dels2)
		s.fill(ctx, im, full, "fill", s.o.prefill, 8, true)
	}
	s.row(fmt.Sprintf("ADD IPAM alone, %d allocated", s.o.prefill), a, 0.25, "≤ 0.25×")
	s.row(fmt.Sprintf("DEL IPAM alone, %d allocated", s.o.prefill), d, 0, "")
	s.row(fmt.Sprintf("repeated DEL (no cached result), %d allocated", s.o.prefill), d2, 0, "")
	var flat [2]float64
	for i := range flat {
		if ae[i] > 0 {
			flat[i] = float64(a[i]) / float64(ae[i])
		}
	}
	s.rows = append(s.rows, []string{fmt.Sprintf("ADD flatness (%d allocated ÷ empty pool, interleaved)", s.o.prefill),
		fmt.Sprintf("%.2f×", flat[0]), fmt.Sprintf("%.2f×", flat[1]), "-", "ours ≤ 1.2×", verdict(flat[0] > 0 && flat[0] <= 1.2, flat[0] > 0)})
	return nil
}

// fill ADDs (or, with del, DELs) n attachments with par at a time; a
// failed one is tried again, as a kubelet would, up to three times. It
// returns how many still failed.
func (s *cipamRun) fill(ctx context.Context, im *cipamImpl, l *spec.ConfList, prefix string, n, par int, del bool) int {
	var mu sync.Mutex
	failed := 0
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for j := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var err error
			for range 3 {
				if _, _, err = im.ipamAlone(ctx, l, fmt.Sprintf("%s-%d", prefix, j), del); err == nil {
					return
				}
			}
			mu.Lock()
			if failed++; failed == 1 {
				s.notes = append(s.notes, fmt.Sprintf("%s, %s %s: first failure after 3 tries: %s", im.label, prefix, map[bool]string{false: "ADD", true: "DEL"}[del], oneLine(err.Error())))
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return failed
}

// sandboxTimeout is the kubelet's limit for a sandbox's network setup (and
// teardown) call.
const sandboxTimeout = 4 * time.Minute

// many: o.pods pods, each attached to o.nets networks one after the other
// (as a delegating plugin does), all pods at once (whereabouts issue 313:
// kubelet's 4-minute sandbox timeout was hit).
func (s *cipamRun) many(ctx context.Context) error {
	if s.o.pods == 0 || s.o.nets == 0 {
		s.notes = append(s.notes, "the many-networks workload (pods × networks, all pods at once) runs with -cipam-many PODSxNETS, e.g. 128x16")
		return nil
	}
	var wall, slowest timed
	var fails, dups, left [2]int
	total := s.o.pods * s.o.nets
	for i, im := range s.impls {
		var lists []*spec.ConfList
		for k := range s.o.nets {
			lists = append(lists, im.list(fmt.Sprintf("pbb-cipam-many-%d", k), fmt.Sprintf("10.%d.%d.0/24", 100+i, k), false))
		}
		var mu sync.Mutex
		seen := map[netip.Addr]int{}
		wall[i] = burst(s.o.pods, func(p int) {
			t0 := time.Now()
			// A kubelet gives RunPodSandbox, all networks included, 4
			// minutes; what is not done by then fails.
			pctx, cancel := context.WithTimeout(ctx, sandboxTimeout)
			defer cancel()
			for k, l := range lists {
				res, _, err := im.ipamAlone(pctx, l, fmt.Sprintf("many-%d", p), false)
				mu.Lock()
				if err != nil {
					fails[i]++
					if fails[i] == 1 {
						s.notes = append(s.notes, fmt.Sprintf("many networks, %s: first failure (network %d): %s", im.label, k, oneLine(err.Error())))
					}
				} else {
					for _, ip := range res.IPs {
						seen[ip.Address.Addr()]++
					}
				}
				mu.Unlock()
			}
			mu.Lock()
			slowest[i] = max(slowest[i], time.Since(t0))
			mu.Unlock()
		})
		for _, n := range seen {
			dups[i] += n - 1
		}
		burst(s.o.pods, func(p int) {
			pctx, cancel := context.WithTimeout(ctx, sandboxTimeout)
			defer cancel()
			for _, l := range lists {
				im.ipamAlone(pctx, l, fmt.Sprintf("many-%d", p), true)
			}
		})
		n, err := s.allocated(i)
		if err != nil {
			return err
		}
		left[i] = n
	}
	name := fmt.Sprintf("%d pods × %d networks", s.o.pods, s.o.nets)
	s.row(name+": wall time", wall, 0, "")
	s.row(name+": slowest pod", slowest, 0, "")
	s.countRow(name+": ADDs failed (4-minute sandbox timeout included)", fails, total)
	s.countRow(name+": duplicate IPs", dups, total)
	s.countRow(name+": addresses left after DEL", left, total)
	return nil
}

// allocated counts the addresses an implementation holds in the cluster:
// IPAllocations, or the allocations of whereabouts' IPPools plus its
// overlapping-range reservations.
func (s *cipamRun) allocated(i int) (int, error) {
	if s.impls[i].typ == "cluster-ipam" {
		_, body, err := s.c.Do("GET", "/apis/cluster-ipam.patchbay.dev/v1alpha1/ipallocations", nil)
		if err != nil {
			return 0, err
		}
		var l struct{ Items []json.RawMessage }
		json.Unmarshal(body, &l)
		return len(l.Items), nil
	}
	_, body, err := s.c.Do("GET", "/apis/whereabouts.cni.cncf.io/v1alpha1/ippools", nil)
	if err != nil {
		return 0, err
	}
	var pools struct {
		Items []struct {
			Spec struct {
				Allocations map[string]json.RawMessage `json:"allocations"`
			} `json:"spec"`
		}
	}
	json.Unmarshal(body, &pools)
	n := 0
	for _, p := range pools.Items {
		n += len(p.Spec.Allocations)
	}
	_, body, err = s.c.Do("GET", "/apis/whereabouts.cni.cncf.io/v1alpha1/overlappingrangeipreservations", nil)
	if err != nil {
		return 0, err
	}
	var res struct{ Items []json.RawMessage }
	json.Unmarshal(body, &res)
	return n + len(res.Items), nil
}

// writeKubeconfig writes a kubeconfig for server (the relay), trusting the
// cluster's CA, with the admin token.
func writeKubeconfig(c *kubetest.Cluster, path, server string) error {
	kc := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "b",
		"clusters": []any{map[string]any{"name": "b", "cluster": map[string]any{"server": server, "certificate-authority": c.CAFile}}},
		"users":    []any{map[string]any{"name": "u", "user": map[string]any{"token": c.Token}}},
		"contexts": []any{map[string]any{"name": "b", "context": map[string]any{"cluster": "b", "user": "u"}}},
	}
	b, err := yaml.Marshal(kc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// podArgs are a kubelet's CNI_ARGS for a pod named after the container
// (whereabouts refuses to work without a pod name, and hands a pod's
// address out again to the same pod name).
func podArgs(id string) [][2]string {
	return [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "bench"}, {"K8S_POD_NAME", id}, {"K8S_POD_INFRA_CONTAINER_ID", id}}
}
