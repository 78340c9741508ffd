package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/internal/invoke"
	"github.com/patchbay-cni/patchbay/internal/netns"
	pbrt "github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// The per-plugin breakdown runs the seed chain one plugin at a time, with
// the requests our runtime builds (prevResult, capability args filtered by
// each plugin's "capabilities"), and times each plugin's exec, so a MISS
// on the chain can be traced to the plugin that costs it. No result cache.

// stepTimes holds, per plugin position, ADD and DEL exec times.
type stepTimes struct {
	add, del [][]time.Duration
}

func stepEnv(verb, cniPath string, rt map[string]string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CNI_") {
			env = append(env, kv)
		}
	}
	env = append(env, "CNI_COMMAND="+verb, "CNI_PATH="+cniPath)
	for k, v := range rt {
		env = append(env, k+"="+v)
	}
	return env
}

// stepped returns a custom run for s that times each plugin of s.list.
func stepped(s *subject, st *stepTimes) func(ctx context.Context, i int, ctrPath string) (time.Duration, time.Duration, error) {
	n := len(s.list.Plugins)
	st.add, st.del = make([][]time.Duration, n), make([][]time.Duration, n)
	return func(ctx context.Context, i int, ctrPath string) (time.Duration, time.Duration, error) {
		l, caps := s.list, seedCapArgs(i)
		rt := map[string]string{"CNI_CONTAINERID": fmt.Sprintf("pbb-step-%s-%d", s.impl.key, i),
			"CNI_NETNS": ctrPath, "CNI_IFNAME": "eth0", "CNI_ARGS": ""}
		cniPath := strings.Join(s.host.cni.Path, ":")
		run := func(p *spec.PluginConf, verb string, prev *spec.Result) ([]byte, time.Duration, error) {
			path, err := invoke.Find(p.Network.Type, s.host.cni.Path)
			if err != nil {
				return nil, 0, err
			}
			req, err := spec.BuildRequest(p, l.Name, l.Version(), prev, pbrt.RuntimeConfigFor(p, caps), nil)
			if err != nil {
				return nil, 0, err
			}
			var out []byte
			var d time.Duration
			err = netns.Do(s.host.path, func() (err error) {
				t0 := time.Now()
				out, err = invoke.Exec(ctx, path, stepEnv(verb, cniPath, rt), req, nil)
				d = time.Since(t0)
				return err
			})
			if err != nil {
				err = fmt.Errorf("%s %s: %w", p.Network.Type, verb, err)
			}
			return out, d, err
		}
		var prev *spec.Result
		addD := make([]time.Duration, n)
		var addErr error
		for k, p := range l.Plugins {
			out, d, err := run(p, spec.CmdAdd, prev)
			if err != nil {
				addErr = err
				break
			}
			if prev, err = spec.ParseResult(out, l.Version()); err != nil {
				addErr = fmt.Errorf("%s ADD result: %w", p.Network.Type, err)
				break
			}
			addD[k] = d
		}
		delD := make([]time.Duration, n)
		var delErr error
		for k := n - 1; k >= 0; k-- { // DEL even after a failed ADD
			_, d, err := run(l.Plugins[k], spec.CmdDel, prev)
			if err != nil && delErr == nil {
				delErr = err
			}
			delD[k] = d
		}
		if addErr != nil || delErr != nil {
			return 0, 0, fmt.Errorf("ADD: %v; DEL: %v", addErr, delErr)
		}
		var at, dt time.Duration
		if i >= 0 { // not the warm-up
			for k := range n {
				st.add[k], st.del[k] = append(st.add[k], addD[k]), append(st.del[k], delD[k])
				at, dt = at+addD[k], dt+delD[k]
			}
		}
		return at, dt, nil
	}
}

// stepsWorkload prints, per plugin of the seed chain, the median exec time
// of each plugin set.
func (e *env) stepsWorkload(ctx context.Context) error {
	tag := "seed chain per plugin"
	subs, err := e.subjects(tag, []string{"bridge", "host-local", "tuning", "portmap"},
		func(h *host) string { return bridgeConf(netSeed, h.dataDir, "10.204.0.0/16", true) }, nil)
	if err != nil {
		return err
	}
	st := make([]stepTimes, len(subs))
	for i, s := range subs {
		if s.unavailable == "" {
			s.custom = stepped(s, &st[i])
		}
	}
	if err := measure(ctx, e.ns, subs, e.n); err != nil {
		return err
	}
	e.noteFailures(tag, subs)
	l := mustList(bridgeConf(netSeed, "/", "10.204.0.0/16", true))
	name := func(k int) string {
		if t := l.Plugins[k].Network.Type; t != "bridge" {
			return t
		}
		return "bridge (host-local in it)"
	}
	c := func(i int, verb string, k int) cell {
		s := subs[i]
		if s.unavailable != "" {
			return cell{text: "n/a"}
		}
		samples := st[i].add
		if verb == "DEL" {
			samples = st[i].del
		}
		if k >= len(samples) {
			return cell{text: "-"}
		}
		return timeCell(s, samples[k])
	}
	for k := range l.Plugins {
		e.tbl.add(compareRow("  seed ADD, "+name(k)+" exec", c(0, "ADD", k), c(1, "ADD", k), c(2, "ADD", k), target{}))
	}
	for k := len(l.Plugins) - 1; k >= 0; k-- {
		e.tbl.add(compareRow("  seed DEL, "+name(k)+" exec", c(0, "DEL", k), c(1, "DEL", k), c(2, "DEL", k), target{}))
	}
	e.tbl.note("seed per plugin: each plugin exec timed alone with the requests our runtime builds (no result cache), in separate iterations from the chain rows")
	return nil
}
