package ipvlan

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/ifplugin/iftest"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
	"github.com/patchbay-cni/patchbay/spec"
)

// This machine's kernel has no ipvlan: every test runs in the test VM.
func TestMain(m *testing.M) { os.Exit(vmtest.Wrap(func() int { return testutil.Run(m) })) }

func TestContractVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		iftest.Contract(t, Plugin(), iftest.Spec{
			Keys:   map[string]any{"master": "m0", "mode": "l2"},
			Master: true, MTU: true,
			Bad: []iftest.Bad{{Name: "mode", Keys: map[string]any{"mode": "bridge"}, Want: []string{`"mode"`, `"bridge"`}}},
		})
	})
}

// Each mode makes an ipvlan of that mode sharing the master's MAC; CHECK
// notices another mode.
func TestModesVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		e := iftest.New(t, Plugin())
		e.Master("m0", 0)
		cont, contPath := e.Container()
		masterMAC := iftest.IP(t, e.Host, "-o", "link", "show", "m0")
		for _, mode := range []string{"l2", "l3", "l3s", ""} {
			conf := e.Conf("1.1.0", map[string]any{"master": "m0", "mode": mode}, "10.120.0.0/24")
			r, out := e.Add(conf, "m-"+mode, contPath, "eth0")
			want := mode
			if want == "" {
				want = "l2"
			}
			if l := iftest.IP(t, cont, "-d", "-o", "link", "show", "eth0"); !strings.Contains(l, "ipvlan  mode "+want+" ") {
				t.Errorf("mode %q: %s", mode, l)
			}
			if !strings.Contains(masterMAC, r.Interfaces[0].Mac) {
				t.Errorf("ipvlan MAC %s is not the master's: %s", r.Interfaces[0].Mac, masterMAC)
			}
			e.OK(spec.CmdCheck, iftest.WithPrev(t, conf, out), "m-"+mode, contPath, "eth0")
			other := "l3"
			if want == "l3" {
				other = "l3s"
			}
			ce := e.Fails(spec.CmdCheck, iftest.WithPrev(t, iftest.Set(t, conf, "mode", other), out), "m-"+mode, contPath, "eth0")
			if !strings.Contains(ce.Msg, "mode is "+want) {
				t.Errorf("CHECK with mode %s on a %s ipvlan: %s", other, want, ce.Msg)
			}
			e.OK(spec.CmdDel, conf, "m-"+mode, contPath, "eth0")
		}
	})
}

// Chained after a plugin whose result names one interface and has IPs:
// without "master" and "ipam" the ipvlan sits on that interface and takes
// those IPs and routes; the result lists only the ipvlan interface.
// Without IPs (or with several interfaces) ADD is refused before
// anything is made.
func TestChainedVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		e := iftest.New(t, Plugin())
		e.Master("m0", 0)
		cont, contPath := e.Container()
		prev := `{"cniVersion":"1.0.0","interfaces":[{"name":"m0"}],
		  "ips":[{"address":"10.121.0.5/24","gateway":"10.121.0.1"},{"address":"fd00:121::5/64"}],
		  "routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.121.0.53"]}}`
		conf := iftest.WithPrev(t, e.Conf("1.0.0", map[string]any{"mode": "l2"}), prev)
		r, out := e.Add(conf, "chained", contPath, "eth0")
		if len(r.Interfaces) != 1 || r.Interfaces[0].Name != "eth0" || len(r.IPs) != 2 || *r.IPs[0].Interface != 0 || len(r.Routes) != 1 || len(r.DNS.Nameservers) != 1 {
			t.Errorf("chained result: %s", out)
		}
		if l := iftest.IP(t, cont, "-o", "addr", "show", "eth0"); !strings.Contains(l, "10.121.0.5/24") || !strings.Contains(l, "fd00:121::5/64") {
			t.Errorf("addresses: %s", l)
		}
		if rt := iftest.IP(t, cont, "route"); !strings.Contains(rt, "default via 10.121.0.1 dev eth0") {
			t.Errorf("routes: %s", rt)
		}
		e.OK(spec.CmdCheck, iftest.WithPrev(t, conf, out), "chained", contPath, "eth0")
		e.OK(spec.CmdDel, conf, "chained", contPath, "eth0")
		if iftest.Exists(t, cont, "eth0") {
			t.Error("DEL left eth0")
		}

		for _, bad := range []struct{ name, prev, want string }{
			{"no-ips", `{"cniVersion":"1.0.0","interfaces":[{"name":"m0"}]}`, `"ipam"`},
			{"two-interfaces", `{"cniVersion":"1.0.0","interfaces":[{"name":"m0"},{"name":"x"}],"ips":[{"address":"10.121.0.6/24"}]}`, `"master"`},
		} {
			before := iftest.State(t, cont)
			c := iftest.WithPrev(t, e.Conf("1.0.0", map[string]any{"mode": "l2"}), bad.prev)
			ce := e.Fails(spec.CmdAdd, c, bad.name, contPath, "eth0")
			if ce.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, bad.want) {
				t.Errorf("%s: code %d: %s", bad.name, ce.Code, ce.Msg)
			}
			if iftest.State(t, cont) != before {
				t.Errorf("%s: the refused ADD changed the container", bad.name)
			}
		}
	})
}

// Traffic between two containers on one master, in l2 and l3 mode, both
// families; in l3 mode the containers need no gateway on the link.
func TestTrafficVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		for _, mode := range []string{"l2", "l3", "l3s"} {
			t.Run(mode, func(t *testing.T) {
				e := iftest.New(t, Plugin())
				e.Master("m0", 0)
				a, aPath := e.Container()
				b, bPath := e.Container()
				conf := e.Conf("1.1.0", map[string]any{"master": "m0", "mode": mode}, "10.122.0.0/24", "fd00:122::/64")
				e.Add(conf, "a", aPath, "eth0")
				e.Add(conf, "b", bPath, "eth0")
				for _, dst := range []string{"10.122.0.3", "fd00:122::3"} {
					if !iftest.Ping(t, a, dst, 3) {
						t.Errorf("%s: ping a -> b (%s) failed; a:\n%s\nb:\n%s", mode, dst,
							iftest.IP(t, a, "addr")+iftest.IP(t, a, "-6", "route"), iftest.IP(t, b, "addr")+iftest.IP(t, b, "-6", "route"))
					}
				}
				e.OK(spec.CmdDel, conf, "a", aPath, "eth0")
				e.OK(spec.CmdDel, conf, "b", bPath, "eth0")
			})
		}
	})
}

// The result's JSON for the chained case keeps prevResult's DNS unless
// the configuration has its own.
func TestChainedDNSVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		e := iftest.New(t, Plugin())
		e.Master("m0", 0)
		_, contPath := e.Container()
		prev := `{"cniVersion":"1.0.0","interfaces":[{"name":"m0"}],"ips":[{"address":"10.123.0.5/24"}],"dns":{"nameservers":["10.123.0.53"]}}`
		conf := iftest.Set(t, iftest.WithPrev(t, e.Conf("1.0.0", map[string]any{"mode": "l2"}), prev), "dns", map[string]any{"nameservers": []string{"9.9.9.9"}})
		_, out := e.Add(conf, "dns", contPath, "eth0")
		var m struct {
			DNS struct{ Nameservers []string } `json:"dns"`
		}
		json.Unmarshal([]byte(out), &m)
		if len(m.DNS.Nameservers) != 1 || m.DNS.Nameservers[0] != "9.9.9.9" {
			t.Errorf("dns: %s", out)
		}
		e.OK(spec.CmdDel, conf, "dns", contPath, "eth0")
	})
}
