package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
	pbrt "github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// impl is one set of plugin executables: ours, the reference v1.9.1 or
// Debian's 1.1.1. All run through our runtime library.
type impl struct {
	key, label, dir string
}

// missing lists the plugin types not installed in the impl's directory.
func (im *impl) missing(types ...string) []string {
	var out []string
	for _, t := range types {
		if st, err := os.Stat(filepath.Join(im.dir, t)); err != nil || st.Mode()&0o111 == 0 {
			out = append(out, t)
		}
	}
	return out
}

// host is a test "host" netns in which an impl's plugins run, with its own
// host-local dataDir and result cache.
type host struct {
	name, path string
	dataDir    string
	cni        *pbrt.CNI
}

func newHost(ns *nsManager, work string, im *impl, tag string) (*host, error) {
	name, path, err := ns.add("h", true)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(work, im.key+"-"+tag+"-")
	if err != nil {
		return nil, err
	}
	return &host{
		name: name, path: path,
		dataDir: filepath.Join(dir, "ipam"),
		cni: &pbrt.CNI{Path: []string{im.dir}, CacheDir: filepath.Join(dir, "cache"),
			Timeout: 60 * time.Second},
	}, nil
}

// add runs ADD in the host netns and times the runtime call alone.
func (h *host) add(ctx context.Context, l *spec.ConfList, rt *pbrt.RuntimeConf) (*spec.Result, time.Duration, error) {
	var res *spec.Result
	var d time.Duration
	err := netns.Do(h.path, func() (err error) {
		t0 := time.Now()
		res, err = h.cni.AddNetworkList(ctx, l, rt)
		d = time.Since(t0)
		return err
	})
	return res, d, err
}

func (h *host) del(ctx context.Context, l *spec.ConfList, rt *pbrt.RuntimeConf) (time.Duration, error) {
	var d time.Duration
	err := netns.Do(h.path, func() error {
		t0 := time.Now()
		err := h.cni.DelNetworkList(ctx, l, rt)
		d = time.Since(t0)
		return err
	})
	return d, err
}

// subject is one column entry of a workload: an impl (or the veth floor)
// with its host, measured ADD then DEL once per iteration.
type subject struct {
	impl *impl
	host *host
	list *spec.ConfList
	// capArgs gives iteration i's capability args (nil: none).
	capArgs func(i int) map[string]any
	// podArgs adds the CNI_ARGS of a Kubernetes pod (K8S_POD_*), named
	// after the container, as a kubelet would.
	podArgs bool
	// custom replaces the ADD/DEL pair (the veth floor).
	custom func(ctx context.Context, i int, ctrPath string) (time.Duration, time.Duration, error)
	// unavailable says why the subject is not measured (missing plugin,
	// failed warm-up).
	unavailable string

	adds, dels []time.Duration
	fails      int
	firstErr   error
}

func (s *subject) rt(i int, ctrPath string) *pbrt.RuntimeConf {
	rt := &pbrt.RuntimeConf{ContainerID: fmt.Sprintf("pbb-%s-%d", s.impl.key, i), NetNS: ctrPath, IfName: "eth0"}
	if s.capArgs != nil {
		rt.CapabilityArgs = s.capArgs(i)
	}
	if s.podArgs {
		rt.Args = podArgs(rt.ContainerID)
	}
	return rt
}

// once attaches and detaches one container; DEL runs even when ADD failed,
// as a runtime must (spec §3), so nothing is left for the next iteration.
func (s *subject) once(ctx context.Context, i int, ctrPath string) (time.Duration, time.Duration, error) {
	if s.custom != nil {
		return s.custom(ctx, i, ctrPath)
	}
	rt := s.rt(i, ctrPath)
	_, a, aerr := s.host.add(ctx, s.list, rt)
	d, derr := s.host.del(ctx, s.list, rt)
	if aerr != nil {
		return a, d, fmt.Errorf("ADD: %w", aerr)
	}
	if derr != nil {
		return a, d, fmt.Errorf("DEL: %w", derr)
	}
	return a, d, nil
}

// measure runs n iterations; in each, every available subject attaches one
// fresh container netns, the subjects' order rotating so that machine noise
// and order effects hit all of them alike. Each subject first does one
// untimed warm-up (bridge, firewall tables, dataDir and index creation are
// one-time costs a node pays once, not per container).
func measure(ctx context.Context, ns *nsManager, subs []*subject, n int) error {
	const warm = -1
	for _, s := range subs {
		if s.unavailable != "" {
			continue
		}
		name, path, err := ns.add("c", false)
		if err != nil {
			return err
		}
		if _, _, err := s.once(ctx, warm, path); err != nil {
			s.unavailable = "warm-up failed: " + oneLine(err.Error())
		}
		if err := ns.del(name); err != nil {
			return err
		}
	}
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		var names []string
		for k := range subs {
			s := subs[(i+k)%len(subs)]
			if s.unavailable != "" {
				continue
			}
			name, path, err := ns.add("c", false)
			if err != nil {
				return err
			}
			names = append(names, name)
			a, d, err := s.once(ctx, i, path)
			if err != nil {
				s.fails++
				if s.firstErr == nil {
					s.firstErr = err
				}
				continue
			}
			s.adds, s.dels = append(s.adds, a), append(s.dels, d)
		}
		if err := ns.delAll(names); err != nil {
			return err
		}
	}
	return nil
}
