package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/invoke"
	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

// The interface-plugin workloads: ADD and DEL of macvlan+host-local on
// this machine's kernel, and of ipvlan+host-local on Debian's kernel in
// the test VM (this machine's has no ipvlan), each beside the kernel's
// own work (the same link made, addressed, routed and deleted over
// netlink, no plugin) and one process start (the plugin binary answering
// VERSION): the target is that ours costs no more than one process start
// above the kernel's work.

// ifaceConf is <typ> (on master m0) + host-local.
func ifaceConf(typ, name, dataDir, subnet string) string {
	mode := "bridge"
	if typ == "ipvlan" {
		mode = "l2"
	}
	return fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[
  {"type":%q,"master":"m0","mode":%q,
   "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}`,
		cniVersion, name, typ, mode, dataDir, subnet)
}

// addMaster makes the veth pair m0/m0p (up) in a host netns.
func addMaster(h *host) error {
	for _, args := range [][]string{{"link", "add", "m0", "type", "veth", "peer", "name", "m0p"}, {"link", "set", "m0", "up"}, {"link", "set", "m0p", "up"}} {
		if out, err := exec.Command("ip", append([]string{"-n", h.name}, args...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v in %s: %v: %s", args, h.name, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// floorGap is the pause between the floor's ADD and DEL (see there).
var floorGap = 5 * time.Millisecond

// linkFloor is the kernel's work of an ADD and a DEL of typ without a
// plugin: the link made on m0 straight in the container, an address, up,
// a default route; then deleted.
func (e *env) linkFloor(typ string) (*subject, error) {
	im := &impl{key: typ + "floor", label: typ + " floor"}
	h, err := newHost(e.ns, e.work, im, typ+"floor")
	if err != nil {
		return nil, err
	}
	if err := addMaster(h); err != nil {
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
			m, err := netlink.LinkByName("m0")
			if err != nil {
				return err
			}
			attrs := netlink.NewLinkAttrs()
			attrs.Name, attrs.ParentIndex, attrs.Namespace = "eth0", m.Attrs().Index, netlink.NsFd(ctr.Fd())
			var l netlink.Link = &netlink.Macvlan{LinkAttrs: attrs, Mode: netlink.MACVLAN_MODE_BRIDGE}
			if typ == "ipvlan" {
				l = &netlink.IPVlan{LinkAttrs: attrs, Mode: netlink.IPVLAN_MODE_L2}
			}
			if err := netlink.LinkAdd(l); err != nil {
				return fmt.Errorf("%s add: %w", typ, err)
			}
			create = time.Since(t0)
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		err = netns.Do(ctrPath, func() error {
			t0 := time.Now()
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			a, _ := netlink.ParseAddr("10.209.0.2/16")
			if err := netlink.AddrAdd(l, a); err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: []byte{10, 209, 0, 1}}); err != nil {
				return fmt.Errorf("route: %w", err)
			}
			create += time.Since(t0)
			// A plugin's DEL comes at least a runtime call after its ADD:
			// deleting a link within microseconds of setting it up costs
			// more (the kernel's link watch and address setup still hold
			// it), which would make the floor higher than a plugin's DEL.
			time.Sleep(floorGap)
			t0 = time.Now()
			if err := netlink.LinkDel(l); err != nil {
				return fmt.Errorf("%s del: %w", typ, err)
			}
			del = time.Since(t0)
			return nil
		})
		return create, del, err
	}
	return s, nil
}

// versionStart is one process start of each impl's typ binary: it answers
// VERSION (ADD samples: one exec; DEL samples: another).
func (e *env) versionStart(typ string) []*subject {
	var out []*subject
	for _, im := range e.impls {
		s := &subject{impl: im}
		path := filepath.Join(im.dir, typ)
		if miss := im.missing(typ); len(miss) > 0 {
			s.unavailable = "missing " + typ
			out = append(out, s)
			continue
		}
		s.custom = func(ctx context.Context, i int, _ string) (time.Duration, time.Duration, error) {
			var d [2]time.Duration
			for k := range d {
				t0 := time.Now()
				if _, err := invoke.Exec(ctx, path, []string{"CNI_COMMAND=VERSION"}, []byte(`{"cniVersion":"1.0.0"}`), nil); err != nil {
					return 0, 0, err
				}
				d[k] = time.Since(t0)
			}
			return d[0], d[1], nil
		}
		out = append(out, s)
	}
	return out
}

// ifaceRows measures typ+host-local, its floor and the process starts,
// interleaved, and returns the table rows.
func (e *env) ifaceRows(ctx context.Context, typ, subnet, where string) ([]row, error) {
	tag := typ + "+host-local"
	subs, err := e.subjects(tag, []string{typ, "host-local"}, func(h *host) string { return ifaceConf(typ, "pbb-"+typ, h.dataDir, subnet) }, nil)
	if err != nil {
		return nil, err
	}
	for _, s := range subs {
		if s.host != nil {
			if err := addMaster(s.host); err != nil {
				return nil, err
			}
		}
	}
	floor, err := e.linkFloor(typ)
	if err != nil {
		return nil, err
	}
	starts := e.versionStart(typ)
	all := append(append(append([]*subject{}, subs...), floor), starts...)
	if err := measure(ctx, e.ns, all, e.n); err != nil {
		return nil, err
	}
	e.noteFailures(tag+where, subs)
	e.noteFailures(typ+" floor"+where, []*subject{floor})
	e.noteFailures(typ+" VERSION"+where, starts)
	o, r, d := subs[0], subs[1], subs[2]
	rows := []row{
		compareRow("ADD "+tag+where, adds(o), adds(r), adds(d), target{}),
		compareRow("DEL "+tag+where, dels(o), dels(r), dels(d), target{}),
	}
	fa, fd := adds(floor), dels(floor)
	same := func(name string, c cell) row {
		return row{workload: name, ours: c.text, ref: c.text, deb: c.text, ratioDeb: "-", ratioB: "-", target: "-", verdict: "-"}
	}
	rows = append(rows,
		same("kernel floor: "+typ+" create+addr+up+route (netlink)"+where, fa),
		same("kernel floor: "+typ+" delete (netlink)"+where, fd),
		compareRow("one process start: the "+typ+" binary answering VERSION"+where, adds(starts[0]), adds(starts[1]), adds(starts[2]), target{}))
	// Above the floor, in units of one process start of the same binary.
	for _, verb := range []struct {
		name  string
		get   func(*subject) cell
		floor cell
	}{{"ADD", adds, fa}, {"DEL", dels, fd}} {
		var cells [3]string
		var ok [3]bool
		for k, s := range subs {
			c, st := verb.get(s), adds(starts[k])
			if c.v > 0 && verb.floor.v > 0 && st.v > 0 {
				cells[k] = fmt.Sprintf("%.2f", (c.v-verb.floor.v)/st.v)
				ok[k] = c.fails == 0
			} else {
				cells[k] = "-"
			}
		}
		oc := verb.get(o)
		measured := oc.v > 0 && verb.floor.v > 0 && adds(starts[0]).v > 0
		pass := measured && ok[0] && oc.v-verb.floor.v <= adds(starts[0]).v
		rows = append(rows, row{workload: verb.name + " " + tag + " − floor, in process starts" + where,
			ours: cells[0], ref: cells[1], deb: cells[2], ratioDeb: "-", ratioB: "-",
			target: "ours ≤ 1 (the issue)", verdict: verdict(pass, measured)})
	}
	return rows, nil
}

// macvlanWorkload: on this machine's kernel.
func (e *env) macvlanWorkload(ctx context.Context) error {
	rows, err := e.ifaceRows(ctx, "macvlan", "10.204.0.0/16", "")
	for _, r := range rows {
		e.tbl.add(r)
	}
	return err
}

// vmRowsEnv names the file the bench run inside the VM writes its rows to.
const vmRowsEnv = "PATCHBAY_BENCH_VM_ROWS"

// vmRows is what the run inside the VM hands back.
type vmRows struct {
	Rows  [][8]string
	Notes []string
}

// ipvlanWorkload measures inside the test VM: on the host it boots a VM
// whose agent is this program, runs this program there with -only ipvlan,
// and adds the rows it writes to the VM's share; inside the VM it
// measures and writes them.
func (e *env) ipvlanWorkload(ctx context.Context, o *options) error {
	if vmtest.InVM() {
		rows, err := e.ifaceRows(ctx, "ipvlan", "10.205.0.0/16", " (VM)")
		if err != nil {
			return err
		}
		var out vmRows
		for _, r := range rows {
			e.tbl.add(r)
			out.Rows = append(out.Rows, [8]string{r.workload, r.ours, r.ref, r.deb, r.ratioDeb, r.ratioB, r.target, r.verdict})
		}
		out.Notes = e.tbl.notes
		b, _ := json.Marshal(out)
		return os.WriteFile(os.Getenv(vmRowsEnv), b, 0o644)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	m, err := vmtest.Start(vmtest.Options{})
	if err != nil {
		return fmt.Errorf("boot the test VM: %w", err)
	}
	defer m.Stop()
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	args := []string{exe, "-only", "ipvlan", "-n", fmt.Sprint(e.n), "-ours", abs(o.ours), "-ref", abs(o.ref), "-debian", abs(o.deb), "-out", ""}
	env := append(os.Environ(), vmRowsEnv+"="+vmtest.GuestShare+"/rows.json")
	code, err := m.Exec(ctx, vmtest.Command{Args: args, Env: env, Stdout: os.Stderr, Stderr: os.Stderr})
	if err != nil || code != 0 {
		return fmt.Errorf("the ipvlan run in the VM: exit %d: %v", code, err)
	}
	b, err := os.ReadFile(filepath.Join(m.Share(), "rows.json"))
	if err != nil {
		return err
	}
	var got vmRows
	if err := json.Unmarshal(b, &got); err != nil {
		return err
	}
	for _, r := range got.Rows {
		e.tbl.add(row{r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]})
	}
	e.tbl.note("(VM): measured inside the test VM (internal/vmtest: Debian kernel %s under QEMU TCG, no KVM; booted in %v), where everything is several times slower than on the host; compare within the rows only", m.Release, m.Boot.Round(time.Millisecond))
	for _, n := range got.Notes {
		e.tbl.note("(VM) %s", n)
	}
	return nil
}
