package macvlan

import (
	"os"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/ifplugin/iftest"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
	"github.com/patchbay-cni/patchbay/spec"
)

func TestMain(m *testing.M) { os.Exit(vmtest.Wrap(func() int { return testutil.Run(m) })) }

var contract = iftest.Spec{
	Keys:   map[string]any{"master": "m0", "mode": "bridge"},
	Master: true, MTU: true, L2: true,
	Bad: []iftest.Bad{
		{Name: "mode", Keys: map[string]any{"mode": "l2"}, Want: []string{`"mode"`, `"l2"`}},
		{Name: "mac-multicast", Keys: map[string]any{"mac": "01:00:5e:00:00:01"}, Want: []string{"mac", "01:00:5e:00:00:01", "multicast"}},
		{Name: "mac-zero", Keys: map[string]any{"mac": "00:00:00:00:00:00"}, Want: []string{"mac", "00:00:00:00:00:00"}},
		{Name: "mac-garbage", Keys: map[string]any{"mac": "zz:zz"}, Want: []string{"mac", "zz:zz"}},
		{Name: "runtimeConfig-mac", Keys: map[string]any{"runtimeConfig": map[string]any{"mac": "ff:ff:ff:ff:ff:ff"}}, Want: []string{"runtimeConfig.mac", "ff:ff:ff:ff:ff:ff"}},
	},
}

// The plugin contract on this machine's kernel (which has macvlan).
func TestContract(t *testing.T) { iftest.Contract(t, Plugin(), contract) }

// The same contract on Debian's kernel in the test VM.
func TestContractVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) { iftest.Contract(t, Plugin(), contract) })
}

// Each mode makes a macvlan of that mode; CHECK notices another mode.
func TestModes(t *testing.T) {
	e := iftest.New(t, Plugin())
	cont, contPath := e.Container()
	for _, mode := range []string{"bridge", "private", "vepa", "passthru", "source", ""} {
		e.Master("m0", 0) // passthru wants a master of its own
		conf := e.Conf("1.1.0", map[string]any{"master": "m0", "mode": mode}, "10.110.0.0/24")
		_, out := e.Add(conf, "m-"+mode, contPath, "eth0")
		want := mode
		if want == "" {
			want = "bridge"
		}
		if l := iftest.IP(t, cont, "-d", "-o", "link", "show", "eth0"); !strings.Contains(l, "macvlan mode "+want+" ") {
			t.Errorf("mode %q: %s", mode, l)
		}
		e.OK(spec.CmdCheck, iftest.WithPrev(t, conf, out), "m-"+mode, contPath, "eth0")
		// The master's promiscuity is the kernel's business, as with the
		// reference: passthru makes it promiscuous (other modes may too,
		// on a master without unicast filtering, such as a veth); DEL
		// below leaves it as it was.
		if m := iftest.IP(t, e.Host, "-d", "-o", "link", "show", "m0"); want == "passthru" && !strings.Contains(m, "promiscuity 1 ") {
			t.Errorf("passthru: master m0 is not promiscuous: %s", m)
		}
		other := "private"
		if want == "private" {
			other = "vepa"
		}
		ce := e.Fails(spec.CmdCheck, iftest.WithPrev(t, iftest.Set(t, conf, "mode", other), out), "m-"+mode, contPath, "eth0")
		if !strings.Contains(ce.Msg, "mode is "+want) {
			t.Errorf("CHECK with mode %s on a %s macvlan: %s", other, want, ce.Msg)
		}
		e.OK(spec.CmdDel, conf, "m-"+mode, contPath, "eth0")
		if m := iftest.IP(t, e.Host, "-d", "-o", "link", "show", "m0"); !strings.Contains(m, "promiscuity 0 ") {
			t.Errorf("mode %s: master m0 still promiscuous after DEL: %s", want, m)
		}
		iftest.IP(t, e.Host, "link", "del", "m0")
	}
}

// The MAC comes from "mac", CNI_ARGS MAC= and runtimeConfig.mac (the
// "mac" capability), later ones winning, as in the reference; CHECK
// verifies it. A bad CNI_ARGS MAC is code 4 (environment), naming it.
func TestMACSources(t *testing.T) {
	e := iftest.New(t, Plugin())
	e.Master("m0", 0)
	cont, contPath := e.Container()
	base := e.Conf("1.1.0", map[string]any{"master": "m0", "mac": "02:00:00:00:01:01"}, "10.111.0.0/24")
	rc := iftest.Set(t, base, "runtimeConfig", map[string]any{"mac": "02:00:00:00:01:03"})
	for _, c := range []struct {
		name, conf, args, want string
	}{
		{"key", base, "", "02:00:00:00:01:01"},
		{"cni-args-over-key", base, "IgnoreUnknown=1;K8S_POD_NAME=p;MAC=02:00:00:00:01:02", "02:00:00:00:01:02"},
		{"runtimeConfig-over-all", rc, "IgnoreUnknown=1;MAC=02:00:00:00:01:02", "02:00:00:00:01:03"},
	} {
		e.Env["CNI_ARGS"] = c.args
		r, out := e.Add(c.conf, c.name, contPath, "eth0")
		if r.Interfaces[0].Mac != c.want || !strings.Contains(iftest.IP(t, cont, "link", "show", "eth0"), c.want) {
			t.Errorf("%s: MAC %s, want %s", c.name, r.Interfaces[0].Mac, c.want)
		}
		e.OK(spec.CmdCheck, iftest.WithPrev(t, c.conf, out), c.name, contPath, "eth0")
		e.OK(spec.CmdDel, c.conf, c.name, contPath, "eth0")
	}
	e.Env["CNI_ARGS"] = "IgnoreUnknown=1;MAC=03:00:00:00:00:01"
	if ce := e.Fails(spec.CmdAdd, base, "badargs", contPath, "eth0"); ce.Code != spec.ErrInvalidEnvironment || !strings.Contains(ce.Msg, "CNI_ARGS MAC") || !strings.Contains(ce.Msg, "03:00:00:00:00:01") {
		t.Errorf("bad CNI_ARGS MAC: code %d: %s", ce.Code, ce.Msg)
	}
	if iftest.Exists(t, cont, "eth0") {
		t.Error("the refused ADD made eth0")
	}
}

// Without "master" the macvlan sits on the default route's link (IPv4
// first, else IPv6); with none, ADD is refused naming "master".
func TestDefaultRouteMaster(t *testing.T) {
	e := iftest.New(t, Plugin())
	e.Master("m0", 0)
	e.Master("m1", 0)
	cont, contPath := e.Container()
	conf := e.Conf("1.1.0", nil, "10.112.0.0/24")
	refused := e.Fails(spec.CmdAdd, conf, "nodef", contPath, "eth0")
	if refused.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(refused.Msg, `"master"`) || !strings.Contains(refused.Msg, "no default route") {
		t.Errorf("no default route: code %d: %s", refused.Code, refused.Msg)
	}
	iftest.IP(t, e.Host, "addr", "add", "fd00:112::1/64", "dev", "m1", "nodad")
	iftest.IP(t, e.Host, "route", "add", "default", "via", "fd00:112::fe")
	_, out := e.Add(conf, "v6def", contPath, "eth0")
	if l := iftest.IP(t, cont, "-o", "link", "show", "eth0"); !strings.Contains(l, "eth0@if") {
		t.Errorf("eth0: %s", l)
	}
	if !onMaster(t, e, cont, "m1") {
		t.Error("with only an IPv6 default route the master is not m1")
	}
	e.OK(spec.CmdCheck, iftest.WithPrev(t, conf, out), "v6def", contPath, "eth0")
	e.OK(spec.CmdDel, conf, "v6def", contPath, "eth0")

	iftest.IP(t, e.Host, "addr", "add", "192.168.112.1/24", "dev", "m0")
	iftest.IP(t, e.Host, "route", "add", "default", "via", "192.168.112.254")
	e.Add(conf, "v4def", contPath, "eth0")
	if !onMaster(t, e, cont, "m0") {
		t.Error("with an IPv4 default route the master is not m0")
	}
	e.OK(spec.CmdDel, conf, "v4def", contPath, "eth0")
	// STATUS: ready while a default route gives a master, not available
	// (code 50) without one.
	e.OK(spec.CmdStatus, conf, "", "", "")
	iftest.IP(t, e.Host, "route", "del", "default")
	iftest.IP(t, e.Host, "-6", "route", "del", "default")
	if ce := e.Fails(spec.CmdStatus, conf, "", "", ""); ce.Code != spec.ErrPluginNotAvailable {
		t.Errorf("STATUS without a default route: code %d: %s", ce.Code, ce.Msg)
	}
}

// onMaster reports whether the container's eth0 sits on the host link
// called master (its parent's ifindex).
func onMaster(t *testing.T, e *iftest.Env, cont, master string) bool {
	t.Helper()
	l := iftest.IP(t, cont, "-o", "link", "show", "eth0")
	m := iftest.IP(t, e.Host, "-o", "link", "show", master)
	idx, _, _ := strings.Cut(m, ":")
	return strings.Contains(l, "eth0@if"+idx+":")
}

// Layer 2 only (no "ipam"): the interface is up with no addresses and the
// result has no IPs; CHECK passes.
func TestLayer2Only(t *testing.T) {
	e := iftest.New(t, Plugin())
	e.Master("m0", 0)
	cont, contPath := e.Container()
	conf := e.Conf("1.1.0", map[string]any{"master": "m0", "bcqueuelen": 100})
	r, out := e.Add(conf, "l2", contPath, "eth0")
	if len(r.IPs) != 0 || len(r.Interfaces) != 1 {
		t.Errorf("L2 result: %s", out)
	}
	l := iftest.IP(t, cont, "-d", "-o", "link", "show", "eth0")
	if !strings.Contains(l, ",UP") || !strings.Contains(l, "bcqueuelen 100 ") {
		t.Errorf("eth0: %s", l)
	}
	if a := iftest.IP(t, cont, "-4", "-o", "addr", "show", "eth0"); a != "" {
		t.Errorf("L2 interface has addresses: %s", a)
	}
	e.OK(spec.CmdCheck, iftest.WithPrev(t, conf, out), "l2", contPath, "eth0")
	if _, code := e.Run(spec.CmdCheck, iftest.WithPrev(t, iftest.Set(t, conf, "bcqueuelen", 200), out), "l2", contPath, "eth0"); code == 0 {
		t.Error("CHECK with another bcqueuelen passed")
	}
	e.OK(spec.CmdDel, conf, "l2", contPath, "eth0")
}

// Traffic: two containers on one master in bridge mode reach each other;
// in private mode they do not; both reach nothing else.
func TestTraffic(t *testing.T) {
	for _, c := range []struct {
		mode  string
		reach bool
	}{{"bridge", true}, {"private", false}} {
		t.Run(c.mode, func(t *testing.T) {
			e := iftest.New(t, Plugin())
			e.Master("m0", 0)
			a, aPath := e.Container()
			_, bPath := e.Container()
			conf := e.Conf("1.1.0", map[string]any{"master": "m0", "mode": c.mode}, "10.113.0.0/24", "fd00:113::/64")
			e.Add(conf, "a", aPath, "eth0")
			e.Add(conf, "b", bPath, "eth0")
			for _, dst := range []string{"10.113.0.3", "fd00:113::3"} {
				if got := iftest.Ping(t, a, dst, map[bool]int{true: 3, false: 1}[c.reach]); got != c.reach {
					t.Errorf("%s: ping a -> b (%s) = %v, want %v", c.mode, dst, got, c.reach)
				}
			}
			e.OK(spec.CmdDel, conf, "a", aPath, "eth0")
			e.OK(spec.CmdDel, conf, "b", bPath, "eth0")
		})
	}
}

// Layer 2 only at 0.1.0 and 0.2.0, whose results cannot list interfaces:
// the result has no IPs (the reference fails instead: "cannot convert: no
// valid IP addresses"); the configuration's "dns" is kept.
func TestLayer2OnlyOldVersions(t *testing.T) {
	e := iftest.New(t, Plugin())
	e.Master("m0", 0)
	cont, contPath := e.Container()
	for _, v := range []string{"0.1.0", "0.2.0"} {
		conf := iftest.Set(t, e.Conf(v, map[string]any{"master": "m0"}), "dns", map[string]any{"nameservers": []string{"10.0.0.53"}})
		_, out := e.Add(conf, "old", contPath, "eth0")
		if want := `{"cniVersion":"` + v + `","dns":{"nameservers":["10.0.0.53"]}}`; out != want {
			t.Errorf("%s result %s, want %s", v, out, want)
		}
		if l := iftest.IP(t, cont, "-o", "link", "show", "eth0"); !strings.Contains(l, ",UP") {
			t.Errorf("%s: eth0 %s", v, l)
		}
		e.OK(spec.CmdDel, conf, "old", contPath, "eth0")
	}
}
