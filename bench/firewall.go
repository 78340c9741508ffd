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

// The firewall workload (issue 9): bridge + host-local + firewall, each
// plugin's exec timed alone (as the per-plugin seed rows: the requests our
// runtime builds, no result cache) for every plugin set, twice: with the
// default backend (iptables everywhere: the bench's system bus does not
// exist, see isolate, so no firewalld is ever found or programmed) and with
// "backend": "nftables" (ours over netlink; the references do not know the
// value and fall back to iptables, so the same conflist is valid for all
// three). The floors, in the same iterations: a process start (the exec of
// our loopback, which does almost nothing) and the kernel's work (our
// firewall plugin's nftables ADD and DEL run in-process, no exec). Target:
// the firewall's exec costs no more than both floors together. One
// container stays attached in every host for the run (a node with
// containers: not the bridge's first ADD and last DEL).

const netFw = "pbb-fw"

func firewallConf(dataDir, subnet, fwKeys string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[
  {"type":"bridge","bridge":"pbb0","isGateway":true,
   "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}},
  {"type":"firewall","dataDir":%q%s}]}`,
		cniVersion, netFw, dataDir, subnet, filepath.Join(filepath.Dir(dataDir), "fw"), fwKeys)
}

func (e *env) firewallWorkload(ctx context.Context) error {
	types := []string{"bridge", "host-local", "firewall"}
	ipt, err := e.subjects("bridge+firewall (default backend)", types, func(h *host) string { return firewallConf(h.dataDir, "10.205.0.0/16", "") }, nil)
	if err != nil {
		return err
	}
	nft, err := e.subjects("bridge+firewall (nftables)", types, func(h *host) string {
		return firewallConf(h.dataDir, "10.206.0.0/16", `,"backend":"nftables"`)
	}, nil)
	if err != nil {
		return err
	}
	chains := append(append([]*subject{}, ipt...), nft...)
	var keepers []func()
	defer func() {
		for _, f := range keepers {
			f()
		}
	}()
	for _, s := range chains {
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
	st := make([]stepTimes, len(chains))
	for i, s := range chains {
		if s.unavailable == "" {
			s.custom = stepped(s, &st[i])
		}
	}
	lo, err := e.loopbackFloor()
	if err != nil {
		return err
	}
	var loSt stepTimes
	lo.custom = stepped(lo, &loSt)
	kern, err := e.firewallKernelFloor()
	if err != nil {
		return err
	}
	if err := measure(ctx, e.ns, append(chains, lo, kern), e.n); err != nil {
		return err
	}
	e.noteFailures("bridge+firewall (default backend)", ipt)
	e.noteFailures("bridge+firewall (nftables)", nft)
	e.noteFailures("firewall floors", []*subject{lo, kern})

	exec := func(s *subject, t *stepTimes, k int, del bool) cell {
		samples := t.add
		if del {
			samples = t.del
		}
		if s.unavailable != "" || k >= len(samples) {
			return cell{text: "n/a"}
		}
		return timeCell(s, samples[k])
	}
	loAdd, loDel := exec(lo, &loSt, 0, false), exec(lo, &loSt, 0, true)
	floors := map[bool]float64{false: loAdd.v + adds(kern).v, true: loDel.v + dels(kern).v}
	for j, v := range []struct{ name string }{{"default backend (iptables)"}, {`"backend":"nftables" (ours; refs fall back to iptables)`}} {
		subs, sts := chains[3*j:3*j+3], st[3*j:3*j+3]
		for _, del := range []bool{false, true} {
			verb := map[bool]string{false: "ADD", true: "DEL"}[del]
			o, r, d := exec(subs[0], &sts[0], 1, del), exec(subs[1], &sts[1], 1, del), exec(subs[2], &sts[2], 1, del)
			row := compareRow(fmt.Sprintf("%s firewall exec, %s", verb, v.name), o, r, d, target{})
			row.target = fmt.Sprintf("ours ≤ %.2f ms (exec + kernel floors)", floors[del])
			row.verdict = verdict(o.v > 0 && o.fails == 0 && o.v <= floors[del], o.v > 0 && floors[del] > 0)
			e.tbl.add(row)
		}
		for _, del := range []bool{false, true} {
			verb, f := "ADD", adds
			if del {
				verb, f = "DEL", dels
			}
			e.tbl.add(compareRow(fmt.Sprintf("  %s bridge+host-local+firewall (sum of execs), %s", verb, v.name), f(subs[0]), f(subs[1]), f(subs[2]), target{}))
		}
	}
	same := func(name string, c cell) {
		e.tbl.add(row{workload: name, ours: c.text, ref: c.text, deb: c.text, ratioDeb: "-", ratioB: "-", target: "-", verdict: "-"})
	}
	same("floor: process start (exec of our loopback ADD)", loAdd)
	same("floor: process start (exec of our loopback DEL)", loDel)
	same("floor: kernel (our firewall ADD in-process, nftables)", adds(kern))
	same("floor: kernel (our firewall DEL in-process, nftables)", dels(kern))
	e.tbl.note("firewall: each plugin's exec timed alone with the requests our runtime builds; one container stays attached in each host during the runs; the references run iptables in both firewall rows (no nftables backend; an unknown value gives their default) and exec iptables once per rule check or change; ours runs iptables-save and iptables-restore once per IP family (iptables) or one netlink transaction (nftables); a DEL that deleted nftables rules waits, when its netlink socket closes, for the kernel to free them after an RCU grace period (in the kernel floor too)")
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
