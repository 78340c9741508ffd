package bridge

import (
	"fmt"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

// portVlans reads the vlans of a port of the harness's host.
func (h *harness) portVlans(port string) map[uint16]link.PortVlan {
	h.t.Helper()
	out := map[uint16]link.PortVlan{}
	err := netns.Do(h.hostPath, func() error {
		n, err := link.Current()
		if err != nil {
			return err
		}
		defer n.Close()
		l, err := n.LinkByName(port)
		if err != nil {
			return err
		}
		vs, err := n.PortVlans(l)
		for _, v := range vs {
			out[v.Vid] = v
		}
		return err
	})
	if err != nil {
		h.t.Fatalf("vlans of %s: %v", port, err)
	}
	return out
}

func (h *harness) wantVlans(port string, want ...link.PortVlan) {
	h.t.Helper()
	have := h.portVlans(port)
	if len(have) != len(want) {
		h.t.Errorf("port %s vlans %v, want %v", port, have, want)
		return
	}
	for _, w := range want {
		if have[w.Vid] != w {
			h.t.Errorf("port %s vlan %d: %+v, want %+v", port, w.Vid, have[w.Vid], w)
		}
	}
}

func access(vid uint16) link.PortVlan { return link.PortVlan{Vid: vid, PVID: true, Untagged: true} }
func tagged(vid uint16) link.PortVlan { return link.PortVlan{Vid: vid} }

func ping(t *testing.T, ns, dst string) error {
	t.Helper()
	out, err := testutil.InNS(t, ns, "ping", "-c", "1", "-W", "3", dst)
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v: %s", dst, ns, err, out)
	}
	return nil
}

// Access vlans isolate containers on one bridge; a trunk port carries
// several vlans tagged (a container with vlan interfaces reaches both
// access vlans) and vlan 1 untagged; the vlan gateway interface serves
// its vlan. CHECK verifies the port vlans; DEL removes the ports.
func TestVlanAccessAndTrunk(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		h := newHarness(t)
		confA := h.conf("1.1.0", map[string]any{"bridge": "brvl", "vlan": 100, "isGateway": true}, "10.63.100.0/24")
		confB := h.conf("1.1.0", map[string]any{"bridge": "brvl", "vlan": 200}, "10.63.200.0/24")
		// On vlan 200 with an address of vlan 100's subnet: must not be
		// reachable from vlan 100.
		confX := h.conf("1.1.0", map[string]any{"bridge": "brvl", "vlan": 200,
			"ipam": map[string]any{"type": "static", "addresses": []map[string]string{{"address": "10.63.100.77/24"}}}})
		confT := h.conf("1.1.0", map[string]any{"bridge": "brvl",
			"vlanTrunk": []map[string]int{{"minID": 100, "maxID": 101}, {"id": 200}}})
		type att struct {
			id, conf, ns, path, port, result string
		}
		atts := []*att{{id: "c1", conf: confA}, {id: "c2", conf: confA}, {id: "c3", conf: confB}, {id: "cx", conf: confX}, {id: "ct", conf: confT}}
		for _, a := range atts {
			a.ns, a.path = h.container()
			r, raw := h.mustAdd(a.conf, a.id, a.path, "eth0")
			a.port, a.result = r.Interfaces[1].Name, raw
		}
		c1, c2, c3, cx, ct := atts[0], atts[1], atts[2], atts[3], atts[4]
		if got := in(t, h.host, "cat", "/sys/class/net/brvl/bridge/vlan_filtering"); got != "1" {
			t.Errorf("vlan_filtering = %s", got)
		}
		h.wantVlans(c1.port, access(100))
		h.wantVlans(c3.port, access(200))
		h.wantVlans(ct.port, access(1), tagged(100), tagged(101), tagged(200))
		// The gateway of vlan 100 is brvl.100, an access port of vlan 100.
		if out := in(t, h.host, "ip", "-o", "addr", "show", "dev", "brvl.100"); !strings.Contains(out, "10.63.100.1/24") {
			t.Errorf("vlan gateway address: %s", out)
		}
		if !strings.Contains(c1.result, `"brvl.100"`) {
			t.Errorf("result lacks the vlan gateway interface: %s", c1.result)
		}

		in(t, ct.ns, "ip", "link", "add", "link", "eth0", "name", "eth0.100", "type", "vlan", "id", "100")
		in(t, ct.ns, "ip", "link", "add", "link", "eth0", "name", "eth0.200", "type", "vlan", "id", "200")
		in(t, ct.ns, "ip", "addr", "add", "10.63.100.50/24", "dev", "eth0.100")
		in(t, ct.ns, "ip", "addr", "add", "10.63.200.50/24", "dev", "eth0.200")
		in(t, ct.ns, "ip", "link", "set", "eth0.100", "up")
		in(t, ct.ns, "ip", "link", "set", "eth0.200", "up")
		for _, p := range [][2]string{
			{c1.ns, "10.63.100.1"},  // the vlan gateway
			{c1.ns, "10.63.100.3"},  // c2, same access vlan
			{c1.ns, "10.63.100.50"}, // the trunk's vlan 100 interface
			{c3.ns, "10.63.200.50"}, // the trunk's vlan 200 interface
		} {
			if err := ping(t, p[0], p[1]); err != nil {
				t.Error(err)
			}
		}
		if err := ping(t, c1.ns, "10.63.100.77"); err == nil {
			t.Errorf("vlan 100 reached a container on vlan 200")
		}
		if err := ping(t, cx.ns, "10.63.100.50"); err == nil {
			t.Errorf("vlan 200 reached the trunk's vlan 100 interface")
		}

		for _, a := range atts {
			h.mustRun("CHECK", withPrev(t, a.conf, a.result), a.id, a.path)
		}
		in(t, h.host, "bridge", "vlan", "del", "dev", c1.port, "vid", "100")
		if out, code := h.run("CHECK", withPrev(t, c1.conf, c1.result), c1.id, c1.path, "eth0"); code == 0 || !strings.Contains(out, "vlan 100 is missing") {
			t.Errorf("CHECK without the access vlan: %d %s", code, out)
		}
		in(t, h.host, "bridge", "vlan", "add", "dev", c2.port, "vid", "300")
		if out, code := h.run("CHECK", withPrev(t, c2.conf, c2.result), c2.id, c2.path, "eth0"); code == 0 || !strings.Contains(out, "vlan 300 is on the port") {
			t.Errorf("CHECK with an extra vlan: %d %s", code, out)
		}
		in(t, h.host, "bridge", "vlan", "add", "dev", ct.port, "vid", "101", "untagged")
		if out, code := h.run("CHECK", withPrev(t, ct.conf, ct.result), ct.id, ct.path, "eth0"); code == 0 || !strings.Contains(out, "vlan 101 is untagged, want tagged") {
			t.Errorf("CHECK with a trunk vlan untagged: %d %s", code, out)
		}

		for round := 0; round < 2; round++ {
			for _, a := range atts {
				h.mustDel(a.conf, a.id, a.path, "eth0")
			}
		}
		// Only the vlan gateway's port stays (with brvl.100, as the
		// reference leaves them: other attachments may use the gateway).
		for _, l := range strings.Split(in(t, h.host, "ip", "-o", "link", "show", "master", "brvl"), "\n") {
			if l != "" && !strings.Contains(l, "@brvl.100:") {
				t.Errorf("port left on the bridge: %s", l)
			}
		}
		if a := h.allocated(); len(a) != 0 {
			t.Errorf("allocations left: %v", a)
		}
	})
}

// preserveDefaultVlan keeps vlan 1 (untagged; the PVID moves to the access
// vlan); a trunk without it gets vlan 1 back as its native vlan; a trunk of
// the whole range goes in at once; a bridge made by someone else gets vlan
// filtering turned on.
func TestVlanDefaultAndRanges(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		h := newHarness(t)
		in(t, h.host, "ip", "link", "add", "brpre", "type", "bridge")
		cases := []struct {
			extra map[string]any
			want  []link.PortVlan
		}{
			{map[string]any{"vlan": 100, "preserveDefaultVlan": true},
				[]link.PortVlan{{Vid: 1, Untagged: true}, access(100)}},
			{map[string]any{"vlan": 100, "vlanTrunk": []map[string]int{{"id": 300}}},
				[]link.PortVlan{access(100), tagged(300)}},
			{map[string]any{"vlanTrunk": []map[string]int{{"id": 300}}, "preserveDefaultVlan": true},
				[]link.PortVlan{access(1), tagged(300)}},
		}
		for i, c := range cases {
			c.extra["bridge"] = "brpre"
			conf := h.conf("1.0.0", c.extra, "10.64.0.0/24")
			_, path := h.container()
			r, raw := h.mustAdd(conf, fmt.Sprint("d", i), path, "eth0")
			h.wantVlans(r.Interfaces[1].Name, c.want...)
			h.mustRun("CHECK", withPrev(t, conf, raw), fmt.Sprint("d", i), path)
			h.mustDel(conf, fmt.Sprint("d", i), path, "eth0")
		}
		if got := in(t, h.host, "cat", "/sys/class/net/brpre/bridge/vlan_filtering"); got != "1" {
			t.Errorf("an existing bridge's vlan_filtering = %s, want 1", got)
		}
		conf := h.conf("1.1.0", map[string]any{"bridge": "brpre", "vlanTrunk": []map[string]int{{"minID": 2, "maxID": 4094}}}, "10.64.0.0/24")
		_, path := h.container()
		r, raw := h.mustAdd(conf, "full", path, "eth0")
		if got := len(h.portVlans(r.Interfaces[1].Name)); got != 4094 {
			t.Errorf("full trunk: %d vlans on the port, want 4094", got)
		}
		h.mustRun("CHECK", withPrev(t, conf, raw), "full", path)
		h.mustDel(conf, "full", path, "eth0")
	})
}

func (h *harness) mustRun(cmd, conf, id, nsPath string) {
	h.t.Helper()
	if out, code := h.run(cmd, conf, id, nsPath, "eth0"); code != 0 {
		h.t.Fatalf("%s %s failed (%d): %s", cmd, id, code, out)
	}
}
