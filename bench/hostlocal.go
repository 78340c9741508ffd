package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

const hlSubnet = "10.202.0.0/16"

// prefill writes count allocations in the reference on-disk layout into
// netDir: one file per IP, named by the address and holding
// "containerID\r\nifname", and last_reserved_ip.0 naming the last one, as a
// reference host-local that handed them out in order leaves the directory.
// Nothing of our index is written: our plugin must rebuild it.
func prefill(netDir string, count int) error {
	if err := os.MkdirAll(netDir, 0o755); err != nil {
		return err
	}
	a := netip.MustParseAddr("10.202.0.2") // .1 is the range's gateway
	var last netip.Addr
	for i := 0; i < count; i++ {
		body := fmt.Sprintf("pbb-prefill-%d\r\neth0", i)
		if err := os.WriteFile(filepath.Join(netDir, a.String()), []byte(body), 0o644); err != nil {
			return err
		}
		last, a = a, a.Next()
	}
	if count == 0 {
		return nil
	}
	return os.WriteFile(filepath.Join(netDir, "last_reserved_ip.0"), []byte(last.String()), 0o644)
}

// hostLocalWorkload measures host-local alone at an empty pool and with
// prefilled allocations, all six subjects interleaved, and reports how flat
// each impl stays.
func (e *env) hostLocalWorkload(ctx context.Context, count int) error {
	conf := func(h *host) string { return hostLocalConf(h.dataDir, hlSubnet) }
	empty, err := e.subjects("host-local empty", []string{"host-local"}, conf, nil)
	if err != nil {
		return err
	}
	fullTag := fmt.Sprintf("host-local %d allocated", count)
	full, err := e.subjects(fullTag, []string{"host-local"}, conf, nil)
	if err != nil {
		return err
	}
	for _, s := range full {
		if s.host != nil {
			if err := prefill(filepath.Join(s.host.dataDir, netHL), count); err != nil {
				return fmt.Errorf("prefill %s: %w", s.impl.label, err)
			}
		}
	}
	e.tbl.note("host-local: %d allocations prefilled per plugin set by writing reference-layout files (one per IP holding \"containerID\\r\\nifname\", plus last_reserved_ip.0); our plugin rebuilt its index from them during the untimed warm-up ADD+DEL", count)
	all := append(append([]*subject{}, empty...), full...)
	if err := measure(ctx, e.ns, all, e.n); err != nil {
		return err
	}
	e.noteFailures("host-local empty", empty)
	e.noteFailures(fullTag, full)
	short := "10k"
	if count != 10000 {
		short = fmt.Sprint(count)
	}
	for _, verb := range []struct {
		name string
		get  func(*subject) cell
	}{{"ADD", adds}, {"DEL", dels}} {
		e0 := [3]cell{verb.get(empty[0]), verb.get(empty[1]), verb.get(empty[2])}
		e1 := [3]cell{verb.get(full[0]), verb.get(full[1]), verb.get(full[2])}
		e.tbl.add(compareRow("host-local "+verb.name+", empty pool", e0[0], e0[1], e0[2], target{}))
		e.tbl.add(compareRow(fmt.Sprintf("host-local %s, %s allocated", verb.name, short), e1[0], e1[1], e1[2], target{}))
		flat := func(i int) string { return ratio(e1[i].v, e0[i].v) }
		measured := e0[0].v > 0 && e1[0].v > 0
		e.tbl.add(row{workload: fmt.Sprintf("host-local %s flatness (%s ÷ empty)", verb.name, short),
			ours: flat(0), ref: flat(1), deb: flat(2), ratioDeb: "-", ratioB: "-",
			target:  "ours ≤ 1.1× (target)",
			verdict: verdict(measured && e0[0].fails+e1[0].fails == 0 && e1[0].v/e0[0].v <= 1.1, measured)})
	}
	return nil
}
