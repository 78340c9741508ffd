package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/plugins/firewall"
	"github.com/patchbay-cni/patchbay/skel"
)

// The firewall workload (issue 9): ADD and DEL of bridge + host-local +
// firewall against bridge + host-local alone, measured in the same
// iterations for every plugin set, so that the firewall's share is the
// difference. Twice: with the default backend (iptables everywhere: no
// firewalld runs here) and with "backend": "nftables" (ours over netlink;
// the references do not know the value and fall back to iptables, so the
// same conflist is valid for all three). The floors, in the same
// iterations: a process start (ADD and DEL of loopback through the
// runtime, which does almost nothing) and the kernel's work (our firewall
// plugin's nftables ADD and DEL run in-process, no exec). Target: the
// firewall's share costs no more than both floors together. One container
// stays attached in every host for the run (a node with containers).

const netFw = "pbb-fw"

func firewallConf(dataDir, subnet, fwKeys string, withFirewall bool) string {
	s := fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[
  {"type":"bridge","bridge":"pbb0","isGateway":true,
   "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}}`,
		cniVersion, netFw, dataDir, subnet)
	if withFirewall {
		s += fmt.Sprintf(`,
  {"type":"firewall","dataDir":%q%s}`, filepath.Join(filepath.Dir(dataDir), "fw"), fwKeys)
	}
	return s + "]}"
}

func (e *env) firewallWorkload(ctx context.Context) error {
	mk := func(tag, subnet, fwKeys string, withFirewall bool) ([]*subject, error) {
		types := []string{"bridge", "host-local"}
		if withFirewall {
			types = append(types, "firewall")
		}
		return e.subjects(tag, types, func(h *host) string { return firewallConf(h.dataDir, subnet, fwKeys, withFirewall) }, nil)
	}
	bare, err := mk("fw: bridge+host-local", "10.204.0.0/16", "", false)
	if err != nil {
		return err
	}
	ipt, err := mk("bridge+host-local+firewall (default backend)", "10.205.0.0/16", "", true)
	if err != nil {
		return err
	}
	nft, err := mk("bridge+host-local+firewall (nftables)", "10.206.0.0/16", `,"backend":"nftables"`, true)
	if err != nil {
		return err
	}
	lo, err := e.loopbackFloor()
	if err != nil {
		return err
	}
	kern, err := e.firewallKernelFloor()
	if err != nil {
		return err
	}
	// A node with other containers: one stays attached in each host for
	// the whole run, so the measured ADDs and DELs are not the first and
	// last on the bridge (our last DEL also removes the scaffolding, which
	// the references leave).
	var keepers []func()
	defer func() {
		for _, f := range keepers {
			f()
		}
	}()
	for _, s := range append(append(append([]*subject{}, bare...), ipt...), nft...) {
		if s.unavailable != "" {
			continue
		}
		name, path, err := e.ns.add("k", false)
		if err != nil {
			return err
		}
		rt := s.rt(-2, path)
		if _, _, err := s.host.add(ctx, s.list, rt); err != nil {
			s.unavailable = "keeper ADD failed: " + oneLine(err.Error())
		}
		keepers = append(keepers, func() { s.host.del(context.Background(), s.list, rt); e.ns.del(name) })
	}
	all := append(append(append(append([]*subject{}, bare...), ipt...), nft...), lo, kern)
	if err := measure(ctx, e.ns, all, e.n); err != nil {
		return err
	}
	for _, w := range []struct {
		tag  string
		subs []*subject
	}{{"fw: bridge+host-local", bare}, {"bridge+firewall (default)", ipt}, {"bridge+firewall (nftables)", nft}} {
		e.noteFailures(w.tag, w.subs)
	}
	e.noteFailures("fw floors", []*subject{lo, kern})

	floorAdd, floorDel := adds(lo).v+adds(kern).v, dels(lo).v+dels(kern).v
	share := func(with, without []*subject, i int, del bool) cell {
		f := adds
		if del {
			f = dels
		}
		a, b := f(with[i]), f(without[i])
		if a.v <= 0 || b.v <= 0 {
			return cell{text: "-"}
		}
		return cell{v: a.v - b.v, text: fmt.Sprintf("%.2f ms", a.v-b.v), fails: a.fails}
	}
	for _, v := range []struct {
		name string
		subs []*subject
	}{{"default backend: iptables", ipt}, {`"backend":"nftables" (ours; refs fall back to iptables)`, nft}} {
		for _, del := range []bool{false, true} {
			verb, f, floor := "ADD", adds, floorAdd
			if del {
				verb, f, floor = "DEL", dels, floorDel
			}
			e.tbl.add(compareRow(fmt.Sprintf("%s bridge+host-local+firewall, %s", verb, v.name), f(v.subs[0]), f(v.subs[1]), f(v.subs[2]), target{}))
			o, r, d := share(v.subs, bare, 0, del), share(v.subs, bare, 1, del), share(v.subs, bare, 2, del)
			row := compareRow(fmt.Sprintf("  firewall's share of that %s (minus bridge+host-local)", verb), o, r, d, target{})
			row.target = fmt.Sprintf("ours ≤ %.2f ms (process start + kernel)", floor)
			row.verdict = verdict(o.v > 0 && o.fails == 0 && o.v <= floor, o.v > 0 && floor > 0)
			e.tbl.add(row)
		}
	}
	e.tbl.add(compareRow("ADD bridge+host-local (firewall runs' baseline)", adds(bare[0]), adds(bare[1]), adds(bare[2]), target{}))
	e.tbl.add(compareRow("DEL bridge+host-local (firewall runs' baseline)", dels(bare[0]), dels(bare[1]), dels(bare[2]), target{}))
	same := func(name string, c cell) {
		e.tbl.add(row{workload: name, ours: c.text, ref: c.text, deb: c.text, ratioDeb: "-", ratioB: "-", target: "-", verdict: "-"})
	}
	same("floor: process start (ADD loopback, ours, via the runtime)", adds(lo))
	same("floor: process start (DEL loopback)", dels(lo))
	same("floor: kernel (our firewall ADD in-process, nftables)", adds(kern))
	same("floor: kernel (our firewall DEL in-process, nftables)", dels(kern))
	e.tbl.note("firewall: one container stays attached in each host during the firewall runs (so ADD and DEL are not the bridge's first and last); the share is the median of bridge+host-local+firewall minus the median of bridge+host-local, measured in the same iterations in the same kind of host netns; the references run iptables in both firewall rows (they have no nftables backend and take an unknown value for their default); their firewall execs iptables once per rule check or change, ours runs iptables-save and iptables-restore once per IP family (iptables) or one netlink transaction (nftables)")
	return nil
}

// loopbackFloor is ours loopback ADD and DEL through the runtime: a
// plugin exec that does almost nothing.
func (e *env) loopbackFloor() (*subject, error) {
	im := e.impls[0]
	h, err := newHost(e.ns, e.work, im, "fwlo")
	if err != nil {
		return nil, err
	}
	return &subject{impl: &impl{key: "fwlo", label: "loopback floor", dir: im.dir}, host: h, list: mustList(loopbackConf())}, nil
}

// firewallKernelFloor runs our firewall plugin's ADD and DEL in-process in
// a host netns of its own (nftables backend, one address): the kernel's
// work and the plugin's own logic, without the exec.
func (e *env) firewallKernelFloor() (*subject, error) {
	im := &impl{key: "fwk", label: "firewall kernel floor"}
	h, err := newHost(e.ns, e.work, im, "fwk")
	if err != nil {
		return nil, err
	}
	s := &subject{impl: im, host: h}
	dataDir := filepath.Join(filepath.Dir(h.dataDir), "fw")
	p := firewall.Plugin()
	s.custom = func(ctx context.Context, i int, ctrPath string) (time.Duration, time.Duration, error) {
		ip := fmt.Sprintf("10.207.%d.%d", (i+2)/250, (i+2)%250+2)
		conf := fmt.Sprintf(`{"cniVersion":%q,"name":"pbb-fwk","type":"firewall","backend":"nftables","dataDir":%q,
		 "prevResult":{"cniVersion":%q,"interfaces":[{"name":"pbb0"},{"name":"veth0"},{"name":"eth0","sandbox":%q}],
		 "ips":[{"address":"%s/16","gateway":"10.207.0.1","interface":2}]}}`, cniVersion, dataDir, cniVersion, ctrPath, ip)
		env := skel.Env{"CNI_CONTAINERID": fmt.Sprintf("pbb-fwk-%d", i), "CNI_NETNS": ctrPath, "CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent"}
		var add, del time.Duration
		err := netns.Do(h.path, func() error {
			for _, verb := range []string{"ADD", "DEL"} {
				var out bytes.Buffer
				t0 := time.Now()
				code := skel.Run(ctx, p, env.With("CNI_COMMAND", verb), bytes.NewReader([]byte(conf)), &out, os.Stderr)
				d := time.Since(t0)
				if code != 0 {
					return fmt.Errorf("in-process firewall %s: %s", verb, oneLine(out.String()))
				}
				if verb == "ADD" {
					add = d
				} else {
					del = d
				}
			}
			return nil
		})
		return add, del, err
	}
	return s, nil
}
