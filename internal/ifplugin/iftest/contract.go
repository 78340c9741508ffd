package iftest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Spec tells Contract what a plugin takes.
type Spec struct {
	// Keys are the plugin's own keys for a working ADD; a plugin with a
	// master names "m0", which Contract makes in the host namespace.
	Keys map[string]any
	// Master: the plugin sits on a master link ("master", "linkInContainer").
	Master bool
	// MTU: the plugin has the "mtu" key.
	MTU bool
	// L2: ADD without "ipam" makes a layer-2-only interface (else it is
	// refused).
	L2 bool
	// Second, when set, is what a second attachment at the same time sets
	// over Keys (vlan: another VLAN id, as one id can be used once per
	// master).
	Second map[string]any
	// Bad are plugin-specific inputs ADD refuses with code 7 before it
	// changes anything.
	Bad []Bad
}

// Bad is one refused input: Keys set over Spec.Keys (a nil value removes
// the key), and what the message must name (key and value).
type Bad struct {
	Name string
	Keys map[string]any
	Want []string
}

func (s Spec) keys(extra map[string]any) map[string]any {
	k := maps.Clone(s.Keys)
	if k == nil {
		k = map[string]any{}
	}
	for key, v := range extra {
		if v == nil {
			delete(k, key)
		} else {
			k[key] = v
		}
	}
	return k
}

// setup is one subtest's host (with master m0 when the plugin has one)
// and container.
func setup(t *testing.T, p skel.Plugin, s Spec) (e *Env, cont, contPath string) {
	t.Helper()
	e = New(t, p)
	if s.Master {
		e.Master("m0", 0)
	}
	cont, contPath = e.Container()
	return e, cont, contPath
}

// Contract runs the tests every ifplugin-based plugin must pass: each
// spec version's result; IPv4, IPv6 and dual stack with routes; bad input
// refused with code 7 before anything changes; a taken CNI_IFNAME;
// rollback of a failed ADD; CHECK noticing each kind of drift; DEL
// without namespace, after the namespace or the link is gone, with a
// broken configuration, and leaving another type's interface alone;
// STATUS; GC through IPAM; and, with a master, linkInContainer.
func Contract(t *testing.T, p skel.Plugin, s Spec) {
	t.Run("versions", func(t *testing.T) { t.Parallel(); versions(t, p, s) })
	t.Run("families", func(t *testing.T) { t.Parallel(); families(t, p, s) })
	t.Run("bad-input", func(t *testing.T) { t.Parallel(); badInput(t, p, s) })
	t.Run("ifname-taken", func(t *testing.T) { t.Parallel(); ifnameTaken(t, p, s) })
	t.Run("rollback", func(t *testing.T) { t.Parallel(); rollback(t, p, s) })
	t.Run("check-notices-drift", func(t *testing.T) { t.Parallel(); checkDrift(t, p, s) })
	t.Run("del-tolerant", func(t *testing.T) { t.Parallel(); delTolerant(t, p, s) })
	t.Run("status-gc", func(t *testing.T) { t.Parallel(); statusGC(t, p, s) })
	if s.Master {
		t.Run("link-in-container", func(t *testing.T) { t.Parallel(); linkInContainer(t, p, s) })
	}
}

// versions: ADD, CHECK (where the version has it), DEL and a second DEL
// at every spec version, the printed result in that version's shape.
func versions(t *testing.T, p skel.Plugin, s Spec) {
	e, cont, contPath := setup(t, p, s)
	for i, v := range spec.AllVersions {
		conf := e.Conf(v, s.keys(nil), "10.91.0.0/24", "fd00:91::/64")
		id := fmt.Sprint("v", i)
		_, out := e.Add(conf, id, contPath, "eth0")
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		if m["cniVersion"] != v {
			t.Errorf("%s: result cniVersion %v", v, m["cniVersion"])
		}
		if spec.Compare(v, spec.V030) < 0 {
			if m["ip4"] == nil || m["ip6"] == nil || m["interfaces"] != nil {
				t.Errorf("%s: want ip4 and ip6 and no interfaces: %s", v, out)
			}
		} else {
			ifs, _ := m["interfaces"].([]any)
			if len(ifs) != 1 {
				t.Fatalf("%s: want one interface: %s", v, out)
			}
			in := ifs[0].(map[string]any)
			if in["name"] != "eth0" || in["sandbox"] != contPath || in["mac"] == nil {
				t.Errorf("%s: interface %v", v, in)
			}
			ips, _ := m["ips"].([]any)
			if len(ips) != 2 {
				t.Fatalf("%s: want two ips: %s", v, out)
			}
			for _, ip := range ips {
				ipm := ip.(map[string]any)
				if ipm["interface"] != 0.0 {
					t.Errorf("%s: ip %v not on interface 0", v, ipm)
				}
				if _, has := ipm["version"]; has != (spec.Compare(v, spec.V100) < 0) {
					t.Errorf("%s: ips entry version key present = %v", v, has)
				}
			}
		}
		link := IP(t, cont, "-d", "-o", "link", "show", "eth0")
		if !strings.Contains(link, " "+p.Type+" ") || !strings.Contains(link, ",UP") {
			t.Errorf("%s: eth0 is not an up %s: %s", v, p.Type, link)
		}
		if spec.VerbSupported(v, spec.CmdCheck) {
			e.OK(spec.CmdCheck, WithPrev(t, conf, out), id, contPath, "eth0")
		}
		e.OK(spec.CmdDel, conf, id, contPath, "eth0")
		e.OK(spec.CmdDel, conf, id, contPath, "eth0")
		if Exists(t, cont, "eth0") || len(e.Allocated()) != 0 {
			t.Fatalf("%s: after DEL: eth0 there %v, allocations %v", v, Exists(t, cont, "eth0"), e.Allocated())
		}
	}
}

// families: IPv4 only, IPv6 only and both, with default routes through
// the gateways; CHECK passes; the second attachment gets the next
// addresses.
func families(t *testing.T, p skel.Plugin, s Spec) {
	e, cont, contPath := setup(t, p, s)
	for _, c := range []struct {
		name    string
		subnets []string
		routes  []any
		want    []string
	}{
		{"v4", []string{"10.92.0.0/24"}, []any{map[string]any{"dst": "0.0.0.0/0"}}, []string{"10.92.0.2/24", "default via 10.92.0.1"}},
		{"v6", []string{"fd00:92::/64"}, []any{map[string]any{"dst": "::/0"}}, []string{"fd00:92::2/64", "default via fd00:92::1"}},
		{"dual", []string{"10.93.0.0/24", "fd00:93::/64"}, []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}, map[string]any{"dst": "192.168.93.0/24", "gw": "10.93.0.254"}},
			[]string{"10.93.0.2/24", "fd00:93::2/64", "default via 10.93.0.1", "default via fd00:93::1", "192.168.93.0/24 via 10.93.0.254"}},
	} {
		conf := e.Conf("1.1.0", s.keys(nil), c.subnets...)
		var m map[string]any
		json.Unmarshal([]byte(conf), &m)
		m["ipam"].(map[string]any)["routes"] = c.routes
		b, _ := json.Marshal(m)
		conf = string(b)
		r, out := e.Add(conf, c.name, contPath, "eth0")
		state := IP(t, cont, "addr", "show", "eth0") + IP(t, cont, "route") + IP(t, cont, "-6", "route")
		for _, w := range c.want {
			if !strings.Contains(state, w) {
				t.Errorf("%s: %q missing in the container:\n%s", c.name, w, state)
			}
		}
		if len(r.IPs) != len(c.subnets) {
			t.Errorf("%s: result IPs %v", c.name, r.IPs)
		}
		e.OK(spec.CmdCheck, WithPrev(t, conf, out), c.name, contPath, "eth0")
		e.OK(spec.CmdDel, conf, c.name, contPath, "eth0")
	}
}

// refusedUnchanged runs an ADD that must fail with code (and a message
// holding each of want), then checks that neither namespace nor IPAM
// changed, and that the runtime's DEL afterwards succeeds (not for a
// version the plugin refuses, nor when IPAM is missing: a DEL that cannot
// reach IPAM fails, so the runtime retries it rather than leak the
// allocation).
func refusedUnchanged(t *testing.T, e *Env, cont, contPath, conf string, code uint, want ...string) {
	t.Helper()
	e = e.With(t)
	hostBefore, contBefore := State(t, e.Host), State(t, cont)
	ce := e.Fails(spec.CmdAdd, conf, "bad", contPath, "eth0")
	if code != 0 && ce.Code != code {
		t.Errorf("code %d, want %d: %s", ce.Code, code, ce.Msg)
	}
	for _, w := range want {
		if !strings.Contains(ce.Msg, w) {
			t.Errorf("message does not name %q: %s", w, ce.Msg)
		}
	}
	if h, c := State(t, e.Host), State(t, cont); h != hostBefore || c != contBefore {
		t.Errorf("the refused ADD changed state:\nhost before:\n%s\nhost after:\n%s\ncontainer before:\n%s\ncontainer after:\n%s", hostBefore, h, contBefore, c)
	}
	if a := e.Allocated(); len(a) != 0 {
		t.Errorf("the refused ADD left allocations %v", a)
	}
	if code != spec.ErrIncompatibleVersion && !strings.Contains(conf, "no-such-ipam") {
		e.OK(spec.CmdDel, conf, "bad", contPath, "eth0")
	}
}

func badInput(t *testing.T, p skel.Plugin, s Spec) {
	e, cont, contPath := setup(t, p, s)
	bad := slices.Clone(s.Bad)
	if s.MTU {
		bad = append(bad,
			Bad{"mtu-negative", map[string]any{"mtu": -1}, []string{`"mtu"`, "-1"}},
			Bad{"mtu-too-big", map[string]any{"mtu": 70000}, []string{`"mtu"`, "70000"}},
			Bad{"mtu-too-small", map[string]any{"mtu": 60}, []string{`"mtu"`, "60"}})
		if s.Master {
			bad = append(bad, Bad{"mtu-above-master", map[string]any{"mtu": 1501}, []string{`"mtu"`, "1501", "m0"}})
		}
	}
	if s.Master {
		bad = append(bad,
			Bad{"master-missing", map[string]any{"master": "nosuch0"}, []string{`"master"`, "nosuch0"}},
			Bad{"master-bad-name", map[string]any{"master": "a/b"}, []string{`"master"`, "a/b"}})
	}
	for _, b := range bad {
		t.Run(b.Name, func(t *testing.T) {
			conf := e.Conf("1.0.0", s.keys(b.Keys), "10.94.0.0/24")
			refusedUnchanged(t, e, cont, contPath, conf, spec.ErrInvalidNetworkConfig, b.Want...)
		})
	}
	t.Run("no-ipam", func(t *testing.T) {
		e := e.With(t)
		conf := e.Conf("1.0.0", s.keys(nil))
		if s.L2 {
			e.Add(conf, "l2", contPath, "eth0")
			e.OK(spec.CmdDel, conf, "l2", contPath, "eth0")
			return
		}
		refusedUnchanged(t, e, cont, contPath, conf, spec.ErrInvalidNetworkConfig, `"ipam"`)
	})
	t.Run("version", func(t *testing.T) {
		conf := e.Conf("9.9.9", s.keys(nil), "10.94.0.0/24")
		refusedUnchanged(t, e, cont, contPath, conf, spec.ErrIncompatibleVersion, "9.9.9")
	})
}

// ifnameTaken: CNI_IFNAME exists in the container (another plugin's
// veth): ADD fails and changes nothing; DEL leaves the foreign interface.
func ifnameTaken(t *testing.T, p skel.Plugin, s Spec) {
	e, cont, contPath := setup(t, p, s)
	IP(t, cont, "link", "add", "eth0", "type", "veth", "peer", "name", "other0")
	conf := e.Conf("1.1.0", s.keys(nil), "10.95.0.0/24")
	hostBefore, contBefore := State(t, e.Host), State(t, cont)
	ce := e.Fails(spec.CmdAdd, conf, "taken", contPath, "eth0")
	if !strings.Contains(ce.Msg, `"eth0" already exists`) {
		t.Errorf("message: %s", ce.Msg)
	}
	e.OK(spec.CmdDel, conf, "taken", contPath, "eth0")
	if h, c := State(t, e.Host), State(t, cont); h != hostBefore || c != contBefore {
		t.Errorf("ADD and DEL changed state:\nhost before:\n%s\nafter:\n%s\ncontainer before:\n%s\nafter:\n%s", hostBefore, h, contBefore, c)
	}
	if len(e.Allocated()) != 0 {
		t.Errorf("allocations left: %v", e.Allocated())
	}
}

// rollback: IPAM failing, and a route that cannot be added after the
// addresses are on: the failed ADD leaves no interface and no allocation.
func rollback(t *testing.T, p skel.Plugin, s Spec) {
	e, cont, contPath := setup(t, p, s)
	t.Run("ipam-fails", func(t *testing.T) {
		conf := Set(t, e.Conf("1.1.0", s.keys(nil)), "ipam", map[string]any{"type": "no-such-ipam"})
		refusedUnchanged(t, e, cont, contPath, conf, 0, "no-such-ipam")
	})
	t.Run("route-fails", func(t *testing.T) {
		conf := e.Conf("1.1.0", s.keys(nil), "10.96.0.0/24")
		var m map[string]any
		json.Unmarshal([]byte(conf), &m)
		m["ipam"].(map[string]any)["routes"] = []any{map[string]any{"dst": "192.168.96.0/24", "gw": "10.97.0.1"}} // unreachable gateway
		b, _ := json.Marshal(m)
		refusedUnchanged(t, e, cont, contPath, string(b), 0, "192.168.96.0/24")
	})
}

// checkDrift: CHECK passes right after ADD and fails, naming what, after
// each change to what ADD made.
func checkDrift(t *testing.T, p skel.Plugin, s Spec) {
	e, cont, contPath := setup(t, p, s)
	keys := s.keys(nil)
	if s.MTU {
		keys["mtu"] = 1400
	}
	conf := e.Conf("1.1.0", keys, "10.98.0.0/24", "fd00:98::/64")
	var m map[string]any
	json.Unmarshal([]byte(conf), &m)
	m["ipam"].(map[string]any)["routes"] = []any{map[string]any{"dst": "0.0.0.0/0"}}
	b, _ := json.Marshal(m)
	conf = string(b)
	_, out := e.Add(conf, "drift", contPath, "eth0")
	checked := WithPrev(t, conf, out)
	e.OK(spec.CmdCheck, checked, "drift", contPath, "eth0")
	drift := []struct {
		name       string
		do, undo   []string
		wantInDiag string
	}{
		{"down", []string{"link", "set", "eth0", "down"}, []string{"link", "set", "eth0", "up"}, "down"},
		{"address", []string{"addr", "del", "fd00:98::2/64", "dev", "eth0"}, []string{"addr", "add", "fd00:98::2/64", "dev", "eth0", "nodad"}, "fd00:98::2/64"},
		{"route", []string{"route", "del", "default"}, []string{"route", "add", "default", "via", "10.98.0.1"}, "0.0.0.0/0"},
		{"mac", []string{"link", "set", "eth0", "address", "02:00:00:98:98:98"}, nil, "MAC"},
	}
	if s.MTU {
		drift = append(drift, struct {
			name       string
			do, undo   []string
			wantInDiag string
		}{"mtu", []string{"link", "set", "eth0", "mtu", "1300"}, []string{"link", "set", "eth0", "mtu", "1400"}, "MTU"})
	}
	// The MAC change goes last: an ipvlan cannot change it and others
	// are recreated rather than changed back.
	slices.SortStableFunc(drift, func(a, b struct {
		name       string
		do, undo   []string
		wantInDiag string
	}) int {
		return strings.Compare(fmt.Sprint(a.name == "mac"), fmt.Sprint(b.name == "mac"))
	})
	for _, d := range drift {
		if _, err := testutilIP(t, cont, d.do...); err != nil {
			t.Logf("%s: this kernel refuses the change (%v): nothing to check", d.name, err)
			continue
		}
		out, code := e.Run(spec.CmdCheck, checked, "drift", contPath, "eth0")
		if code == 0 {
			t.Errorf("CHECK passed after %s changed", d.name)
		} else if !strings.Contains(out, d.wantInDiag) {
			t.Errorf("CHECK after %s changed does not say so: %s", d.name, out)
		}
		if d.undo != nil {
			IP(t, cont, d.undo...)
			if d.name == "down" {
				// Coming up again drops the routes on the link (the
				// kernel's), which is drift too; restore them.
				testutilIP(t, cont, "route", "add", "default", "via", "10.98.0.1")
			}
			e.OK(spec.CmdCheck, checked, "drift", contPath, "eth0")
		}
	}
	IP(t, cont, "link", "del", "eth0")
	if out, code := e.Run(spec.CmdCheck, checked, "drift", contPath, "eth0"); code == 0 || !strings.Contains(out, "eth0") {
		t.Errorf("CHECK without the interface: %d %s", code, out)
	}
	e.OK(spec.CmdDel, conf, "drift", contPath, "eth0")
}

// delTolerant: DEL with no netns, after the netns is gone, after the
// interface is gone, with a configuration ADD would refuse: all succeed
// and release the allocation.
func delTolerant(t *testing.T, p skel.Plugin, s Spec) {
	e, cont, contPath := setup(t, p, s)
	conf := e.Conf("1.1.0", s.keys(nil), "10.99.0.0/24")
	e.Add(conf, "d1", contPath, "eth0")
	e.OK(spec.CmdDel, conf, "d1", "", "eth0")
	if len(e.Allocated()) != 0 {
		t.Errorf("DEL without netns kept the allocation %v", e.Allocated())
	}
	e.OK(spec.CmdDel, conf, "d1", contPath, "eth0")
	if Exists(t, cont, "eth0") {
		t.Error("DEL with the netns left eth0")
	}

	e.Add(conf, "d2", contPath, "eth0")
	IP(t, cont, "link", "del", "eth0")
	e.OK(spec.CmdDel, conf, "d2", contPath, "eth0")

	broken := Set(t, conf, "mtu", -5)
	broken = Set(t, broken, "mode", "no-such-mode")
	broken = Set(t, broken, "vlanId", 99999)
	e.Add(conf, "d3", contPath, "eth0")
	e.OK(spec.CmdDel, broken, "d3", contPath, "eth0")
	if Exists(t, cont, "eth0") || len(e.Allocated()) != 0 {
		t.Error("DEL with a broken configuration left the interface or the allocation")
	}

	c2, c2Path := e.Container()
	e.Add(conf, "d4", c2Path, "eth0")
	RemoveNS(t, c2)
	e.OK(spec.CmdDel, conf, "d4", c2Path, "eth0")
	if len(e.Allocated()) != 0 {
		t.Errorf("DEL after the netns went kept the allocation %v", e.Allocated())
	}
}

// statusGC: STATUS passes (and, with a master configured that does not
// exist, says the plugin is not available); GC releases the allocation
// of an attachment not in the valid list and keeps the listed one.
func statusGC(t *testing.T, p skel.Plugin, s Spec) {
	e, _, contPath := setup(t, p, s)
	conf := e.Conf("1.1.0", s.keys(nil), "10.100.0.0/24")
	e.OK(spec.CmdStatus, conf, "", "", "")
	if s.Master {
		if ce := e.Fails(spec.CmdStatus, Set(t, conf, "master", "gone0"), "", "", ""); ce.Code != spec.ErrPluginNotAvailable || !strings.Contains(ce.Msg, "gone0") {
			t.Errorf("STATUS with a missing master: code %d: %s", ce.Code, ce.Msg)
		}
	}
	_, c2Path := e.Container()
	conf2 := e.Conf("1.1.0", s.keys(s.Second), "10.100.0.0/24")
	e.Add(conf, "keep", contPath, "eth0")
	e.Add(conf2, "stale", c2Path, "eth0")
	gc := Set(t, conf, "cni.dev/valid-attachments", []any{map[string]any{"containerID": "keep", "ifname": "eth0"}})
	e.OK(spec.CmdGC, gc, "", "", "")
	if a := e.Allocated(); len(a) != 1 || a[0] != "10.100.0.2" {
		t.Errorf("after GC: allocations %v, want only keep's 10.100.0.2", a)
	}
	e.OK(spec.CmdDel, conf, "keep", contPath, "eth0")
	e.OK(spec.CmdDel, conf2, "stale", c2Path, "eth0")
}

// linkInContainer: the master is inside the container; the interface is
// made on it there and CHECK finds its parent there.
func linkInContainer(t *testing.T, p skel.Plugin, s Spec) {
	e, cont, contPath := setup(t, p, s)
	IP(t, cont, "link", "add", "cm0", "type", "veth", "peer", "name", "cm0p")
	IP(t, cont, "link", "set", "cm0", "up")
	IP(t, cont, "link", "set", "cm0p", "up")
	conf := e.Conf("1.1.0", s.keys(map[string]any{"master": "cm0", "linkInContainer": true}), "10.101.0.0/24")
	_, out := e.Add(conf, "lic", contPath, "net1")
	if l := IP(t, cont, "-o", "link", "show", "net1"); !strings.Contains(l, "net1@cm0") {
		t.Errorf("net1 is not on cm0: %s", l)
	}
	e.OK(spec.CmdCheck, WithPrev(t, conf, out), "lic", contPath, "net1")
	// The same configuration without linkInContainer looks for cm0 in the
	// host: CHECK must notice the parent is not there.
	if _, code := e.Run(spec.CmdCheck, WithPrev(t, Set(t, conf, "linkInContainer", false), out), "lic", contPath, "net1"); code == 0 {
		t.Error("CHECK without linkInContainer passed for an interface on a container master")
	}
	e.OK(spec.CmdDel, conf, "lic", contPath, "net1")
	if Exists(t, cont, "net1") || !Exists(t, cont, "cm0") {
		t.Error("DEL: net1 left or cm0 gone")
	}
}
