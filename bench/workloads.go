package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/netns"
)

// env is what every workload shares.
type env struct {
	ns    *nsManager
	work  string  // temporary directory for dataDirs and caches
	impls []*impl // ours, ref, deb: the table's column order
	n     int
	tbl   *table

	floor             *subject // the veth floor, shared by both bridge workloads
	bhlSubs, seedSubs []*subject
	node              *nodeEnv // the node workload's results, printed after the table
}

// subjects makes one subject per impl with its own host netns; an impl that
// lacks a plugin type is recorded as unavailable (and noted once).
func (e *env) subjects(tag string, types []string, conf func(h *host) string, capArgs func(int) map[string]any) ([]*subject, error) {
	var out []*subject
	for _, im := range e.impls {
		s := &subject{impl: im, capArgs: capArgs}
		if miss := im.missing(types...); len(miss) > 0 {
			s.unavailable = fmt.Sprintf("missing %s in %s", strings.Join(miss, ", "), im.dir)
			e.tbl.note("%s, %s: not measured: %s", tag, im.label, s.unavailable)
			out = append(out, s)
			continue
		}
		h, err := newHost(e.ns, e.work, im, tag)
		if err != nil {
			return nil, err
		}
		s.host = h
		s.list = mustList(conf(h))
		out = append(out, s)
	}
	return out, nil
}

// noteFailures records why subjects were not (fully) measured.
func (e *env) noteFailures(tag string, subs []*subject) {
	for _, s := range subs {
		if s.unavailable != "" && s.host != nil {
			e.tbl.note("%s, %s: not measured: %s", tag, s.impl.label, s.unavailable)
		}
		if s.firstErr != nil {
			e.tbl.note("%s, %s: %d of %d runs failed; first: %s", tag, s.impl.label, s.fails, s.fails+len(s.adds), oneLine(s.firstErr.Error()))
		}
	}
}

func adds(s *subject) cell { return timeCell(s, s.adds) }
func dels(s *subject) cell { return timeCell(s, s.dels) }

// bridgeWorkload measures ADD and DEL of bridge+host-local, or of the seed
// chain, with the bare veth floor measured in the same iterations;
// lastBridge adds the floor rows after this workload's.
func (e *env) bridgeWorkload(ctx context.Context, seed, lastBridge bool) error {
	tag, name, subnet := "bridge+host-local", netBHL, "10.200.0.0/16"
	types := []string{"bridge", "host-local"}
	var capArgs func(int) map[string]any
	if seed {
		tag, name, subnet = "seed chain", netSeed, "10.201.0.0/16"
		types = append(types, "tuning", "portmap")
		capArgs = seedCapArgs
	}
	subs, err := e.subjects(tag, types, func(h *host) string { return bridgeConf(name, h.dataDir, subnet, seed) }, capArgs)
	if err != nil {
		return err
	}
	if e.floor == nil {
		if e.floor, err = e.vethFloor(); err != nil {
			return err
		}
	}
	// The floor joins both bridge workloads' iterations (its samples pool).
	all := append(append([]*subject{}, subs...), e.floor)
	if err := measure(ctx, e.ns, all, e.n); err != nil {
		return err
	}
	e.noteFailures(tag, subs)
	if seed {
		e.noteTables(subs)
	}
	o, r, d := subs[0], subs[1], subs[2]
	addTarget := target{0.35, "≤ 0.35× fastest ref"}
	delTarget := target{}
	if seed {
		addTarget = target{0.30, "≤ 0.30× fastest ref"}
		delTarget = target{0.40, "≤ 0.40× fastest ref"}
	}
	e.tbl.add(compareRow("ADD "+tag, adds(o), adds(r), adds(d), addTarget))
	e.tbl.add(compareRow("DEL "+tag, dels(o), dels(r), dels(d), delTarget))
	if seed {
		e.seedSubs = subs
	} else {
		e.bhlSubs = subs
	}
	if lastBridge {
		e.floorRows()
	}
	return nil
}

// masqWorkload measures ADD and DEL of bridge+host-local with ipMasq
// (nftables) and macspoofchk: the bridge's firewall rules on top of the
// bridge+host-local work.
func (e *env) masqWorkload(ctx context.Context) error {
	tag := "bridge+host-local, ipMasq+macspoofchk"
	subs, err := e.subjects(tag, []string{"bridge", "host-local"}, func(h *host) string { return masqConf(h.dataDir, "10.202.0.0/16") }, nil)
	if err != nil {
		return err
	}
	if err := measure(ctx, e.ns, subs, e.n); err != nil {
		return err
	}
	e.noteFailures(tag, subs)
	o, r, d := subs[0], subs[1], subs[2]
	e.tbl.add(compareRow("ADD "+tag, adds(o), adds(r), adds(d), target{}))
	e.tbl.add(compareRow("DEL "+tag, dels(o), dels(r), dels(d), target{}))
	return nil
}

// floorRows prints the veth floor and each measured DEL against it.
func (e *env) floorRows() {
	if e.floor == nil {
		return
	}
	e.noteFailures("veth floor", []*subject{e.floor})
	fc, fd := adds(e.floor), dels(e.floor)
	same := func(name string, c cell) {
		e.tbl.add(row{workload: name, ours: c.text, ref: c.text, deb: c.text, ratioDeb: "-", ratioB: "-", target: "-", verdict: "-"})
	}
	same("kernel floor: veth create+up (netlink, no plugin)", fc)
	same("kernel floor: veth delete (netlink, no plugin)", fd)
	for _, w := range []struct {
		name string
		subs []*subject
	}{{"bridge+host-local", e.bhlSubs}, {"seed chain", e.seedSubs}} {
		if w.subs == nil {
			continue
		}
		fr := func(c cell) string { return ratio(c.v, fd.v) }
		o := dels(w.subs[0])
		measured := o.v > 0 && fd.v > 0
		e.tbl.add(row{workload: "DEL " + w.name + " ÷ veth delete floor", ours: fr(o), ref: fr(dels(w.subs[1])), deb: fr(dels(w.subs[2])),
			ratioDeb: "-", ratioB: "-", target: "ours ≤ 1.2× (target)",
			verdict: verdict(measured && o.fails == 0 && o.v/fd.v <= 1.2, measured)})
	}
}

// vethFloor is the kernel's own cost, no plugin: create a veth pair from
// the host netns with its peer in the container netns, bring both up, then
// delete it from the container side (as bridge DEL does). ADD samples hold
// the create, DEL samples the delete.
func (e *env) vethFloor() (*subject, error) {
	im := &impl{key: "veth", label: "veth floor"}
	h, err := newHost(e.ns, e.work, im, "veth")
	if err != nil {
		return nil, err
	}
	s := &subject{impl: im, host: h}
	s.custom = func(ctx context.Context, i int, ctrPath string) (time.Duration, time.Duration, error) {
		ctr, err := os.Open(ctrPath)
		if err != nil {
			return 0, 0, err
		}
		defer ctr.Close()
		var create, del time.Duration
		err = netns.Do(h.path, func() error {
			t0 := time.Now()
			v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "pbbveth0"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(ctr.Fd())}
			if err := netlink.LinkAdd(v); err != nil {
				return fmt.Errorf("veth add: %w", err)
			}
			if err := netlink.LinkSetUp(v); err != nil {
				netlink.LinkDel(v) // so the next iteration can reuse the name
				return fmt.Errorf("veth up: %w", err)
			}
			create = time.Since(t0)
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		err = netns.Do(ctrPath, func() error {
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
			t0 := time.Now() // the bring-up above is not part of the teardown
			if err := netlink.LinkDel(l); err != nil {
				return fmt.Errorf("veth del: %w", err)
			}
			del = time.Since(t0)
			return nil
		})
		return create, del, err
	}
	return s, nil
}

// noteTables records which nftables tables each impl's chain left in its
// host netns (shows the portmap backend: iptables-nft shows as "ip nat").
func (e *env) noteTables(subs []*subject) {
	var parts []string
	for _, s := range subs {
		if s.host == nil {
			continue
		}
		out, err := exec.Command("ip", "netns", "exec", s.host.name, "nft", "list", "tables").CombinedOutput()
		var tables []string
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "table" {
				tables = append(tables, f[1]+" "+f[2])
			}
		}
		t := strings.Join(tables, ", ")
		if err != nil {
			t = "nft: " + oneLine(string(out))
		}
		if t == "" {
			t = "none"
		}
		parts = append(parts, fmt.Sprintf("%s: %s", s.impl.label, t))
	}
	e.tbl.note("seed chain: nftables tables in the host netns after the runs (portmap backend; iptables-nft shows as ip nat/filter): %s", strings.Join(parts, "; "))
}

// loopbackWorkload measures ADD (and DEL) of loopback alone in a fresh
// container netns with lo down, as a runtime hands it over.
func (e *env) loopbackWorkload(ctx context.Context) error {
	subs, err := e.subjects("loopback", []string{"loopback"}, func(*host) string { return loopbackConf() }, nil)
	if err != nil {
		return err
	}
	if err := measure(ctx, e.ns, subs, e.n); err != nil {
		return err
	}
	e.noteFailures("loopback", subs)
	e.tbl.add(compareRow("ADD loopback", adds(subs[0]), adds(subs[1]), adds(subs[2]), target{}))
	e.tbl.add(compareRow("DEL loopback", dels(subs[0]), dels(subs[1]), dels(subs[2]), target{}))
	return nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
