package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	pbrt "github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// concStats is one impl's outcome over all rounds.
type concStats struct {
	addWall, delWall []time.Duration
	addFails, dups   int
	delFails, left   int
	attempts         int
	firstErr         error
}

// burst runs f for each of n attachments at once (released together) and
// returns the wall time until the last one finished.
func burst(n int, f func(j int)) time.Duration {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for j := 0; j < n; j++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(j)
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	return time.Since(t0)
}

// concurrentWorkload runs conc ADDs at once on one bridge per impl, checks
// for failures and duplicate addresses, then DELs them all at once and
// counts addresses left allocated. Impls alternate order across rounds.
func (e *env) concurrentWorkload(ctx context.Context, conc, rounds int) error {
	tag := fmt.Sprintf("%d concurrent ADDs", conc)
	subs, err := e.subjects(tag, []string{"bridge", "host-local"},
		func(h *host) string { return bridgeConf(netConc, h.dataDir, "10.203.0.0/16", false) }, nil)
	if err != nil {
		return err
	}
	if err := measure(ctx, e.ns, subs, 0); err != nil { // warm-ups only
		return err
	}
	e.noteFailures(tag, subs)
	stats := make([]concStats, len(subs))
	for r := 0; r < rounds; r++ {
		for k := range subs {
			idx := (r + k) % len(subs)
			if subs[idx].unavailable != "" {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := e.concRound(ctx, subs[idx], r, conc, &stats[idx]); err != nil {
				return err
			}
		}
	}
	cellOf := func(i int, f func(*concStats) cell) cell {
		if subs[i].unavailable != "" {
			return cell{text: "n/a"}
		}
		return f(&stats[i])
	}
	wall := func(get func(*concStats) []time.Duration) func(*concStats) cell {
		return func(st *concStats) cell {
			m, ok := median(get(st))
			if !ok {
				return cell{text: "-"}
			}
			return cell{v: float64(m) / float64(time.Millisecond), text: ms(m)}
		}
	}
	count := func(get func(*concStats) int) func(*concStats) cell {
		return func(st *concStats) cell {
			return cell{v: float64(get(st)), text: fmt.Sprintf("%d of %d", get(st), st.attempts)}
		}
	}
	threeRow := func(f func(*concStats) cell) (cell, cell, cell) {
		return cellOf(0, f), cellOf(1, f), cellOf(2, f)
	}
	o, r, d := threeRow(wall(func(s *concStats) []time.Duration { return s.addWall }))
	e.tbl.add(compareRow(fmt.Sprintf("%d concurrent ADDs, one bridge: wall time", conc), o, r, d, target{}))
	zeroRow := func(name string, get func(*concStats) int) {
		o, r, d := threeRow(count(get))
		measured := subs[0].unavailable == "" && stats[0].attempts > 0
		e.tbl.add(row{workload: name, ours: o.text, ref: r.text, deb: d.text, ratioDeb: "-", ratioB: "-",
			target: "ours 0", verdict: verdict(measured && o.v == 0, measured)})
	}
	zeroRow(fmt.Sprintf("%d concurrent ADDs: failed", conc), func(s *concStats) int { return s.addFails })
	zeroRow(fmt.Sprintf("%d concurrent ADDs: duplicate IPs", conc), func(s *concStats) int { return s.dups })
	o, r, d = threeRow(wall(func(s *concStats) []time.Duration { return s.delWall }))
	e.tbl.add(compareRow(fmt.Sprintf("then %d concurrent DELs: wall time", conc), o, r, d, target{}))
	zeroRow(fmt.Sprintf("then %d concurrent DELs: failed", conc), func(s *concStats) int { return s.delFails })
	zeroRow("then: addresses left allocated", func(s *concStats) int { return s.left })
	for i, st := range stats {
		if st.firstErr != nil {
			e.tbl.note("%s, %s: first failure: %s", tag, subs[i].impl.label, oneLine(st.firstErr.Error()))
		}
	}
	e.tbl.note("%s: %d round(s) per plugin set, wall times are medians over rounds, counts are totals", tag, rounds)
	return nil
}

func (e *env) concRound(ctx context.Context, s *subject, r, conc int, st *concStats) error {
	names := make([]string, conc)
	rts := make([]*pbrt.RuntimeConf, conc)
	defer func() {
		var live []string
		for _, n := range names {
			if n != "" {
				live = append(live, n)
			}
		}
		e.ns.delAll(live)
	}()
	for j := range conc {
		name, path, err := e.ns.add("c", false)
		if err != nil {
			return err
		}
		names[j] = name
		rts[j] = &pbrt.RuntimeConf{ContainerID: fmt.Sprintf("pbb-conc-%d-%d", r, j), NetNS: path, IfName: "eth0"}
	}
	results := make([]*spec.Result, conc)
	errs := make([]error, conc)
	st.addWall = append(st.addWall, burst(conc, func(j int) {
		results[j], _, errs[j] = s.host.add(ctx, s.list, rts[j])
	}))
	seen := map[netip.Addr]int{}
	for j := range conc {
		st.attempts++
		if errs[j] != nil {
			st.addFails++
			if st.firstErr == nil {
				st.firstErr = fmt.Errorf("ADD: %w", errs[j])
			}
			continue
		}
		for _, ip := range results[j].IPs {
			seen[ip.Address.Addr()]++
		}
	}
	for _, c := range seen {
		st.dups += c - 1
	}
	st.delWall = append(st.delWall, burst(conc, func(j int) {
		_, errs[j] = s.host.del(ctx, s.list, rts[j])
	}))
	for j := range conc {
		if errs[j] != nil {
			st.delFails++
			if st.firstErr == nil {
				st.firstErr = fmt.Errorf("DEL: %w", errs[j])
			}
		}
	}
	ents, err := os.ReadDir(filepath.Join(s.host.dataDir, netConc))
	if err != nil {
		return fmt.Errorf("%s: read dataDir: %w", s.impl.label, err)
	}
	for _, ent := range ents {
		if _, err := netip.ParseAddr(ent.Name()); err == nil {
			st.left++
		}
	}
	return nil
}
