package firewall

import (
	"encoding/json"
	"reflect"
	"testing"

	fw "github.com/patchbay-cni/patchbay/internal/firewall"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/skel"
)

// FuzzConfig: any configuration and prevResult, through skel as a real
// invocation (testutil.FuzzConfig), either is refused with a configuration
// error that does not name the plugin, or renders, in both rule backends,
// into rules that pass the firewall layer's validation and whose
// iptables-restore lines are single printable lines; the record
// round-trips; the lenient parse of DEL never fails. Nothing touches the
// kernel.
func FuzzConfig(f *testing.F) {
	var seeds [][2]string
	for _, c := range []string{
		`{}`,
		`{"backend":"iptables","ingressPolicy":"same-bridge","iptablesAdminChainName":"MY-ADMIN"}`,
		`{"backend":"nftables","ingressPolicy":"isolated","dataDir":"/run/x"}`,
		`{"backend":"firewalld","firewalldZone":"internal"}`,
		`{"backend":"pf"}`, `{"iptablesAdminChainName":"A\nB"}`, `{"firewalldZone":"a/b/c"}`, `{"backend":5}`, `{"dataDir":"/"}`,
	} {
		for _, p := range []string{
			`{"cniVersion":"1.0.0","interfaces":[{"name":"br0"},{"name":"veth1"},{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.0.0.2/24","interface":2},{"address":"fd00::2/64"}]}`,
			`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}`,
			`{"cniVersion":"1.0.0","interfaces":[{"name":"-x"}],"ips":[]}`,
			`{"cniVersion":"1.0.0","interfaces":[{"name":"br\"0"}],"ips":[{"address":"::ffff:10.0.0.2/120"}]}`,
		} {
			conf := `{"cniVersion":"1.0.0","name":"fuzz","type":"firewall","prevResult":` + p
			if c != "{}" {
				conf += "," + c[1:]
			} else {
				conf += "}"
			}
			seeds = append(seeds, [2]string{conf, ""})
		}
	}
	type loaded struct {
		p *parsed
		r *request
	}
	loadAll := func(a *skel.CmdArgs) (loaded, error) {
		lenient(a.StdinData)
		p, err := parse(a.StdinData)
		if err != nil || a.Conf.PrevResult == nil {
			return loaded{}, err
		}
		r, err := newRequest(a, p, a.Conf.PrevResult)
		return loaded{p, r}, err
	}
	testutil.FuzzConfig(f, Plugin(), seeds, loadAll, func(t *testing.T, l loaded) {
		p, r := l.p, l.r
		if r == nil {
			return
		}
		if err := safeDataDir(p.dataDir); err != nil {
			t.Fatalf("dataDir %q accepted: %v", p.dataDir, err)
		}
		for _, backend := range []string{backendIPT, backendNFT, backendFirewalld} {
			st, err := newState(p, r.att, backend)
			if err != nil {
				t.Fatalf("newState: %v", err)
			}
			st.ips = r.ips
			if r.bridge != "" {
				if st.bridge, err = fw.ParseIfName("bridge", r.bridge, 0); err != nil {
					t.Fatalf("bridge %q passed newRequest but not ParseIfName: %v", r.bridge, err)
				}
			}
			for _, l := range []layout{iptLayout(), nftLayout()} {
				lines, err := fw.DryRun(l.kind, l.rulesets(st.want(backend != backendFirewalld))...)
				if err != nil {
					t.Fatalf("%s: accepted configuration does not render: %v", l.kind, err)
				}
				for _, line := range lines {
					for _, c := range line {
						if c < 0x20 || c > 0x7e {
							t.Fatalf("%s: rendered line with %q: %q", l.kind, c, line)
						}
					}
				}
			}
			rec := st.record()
			b, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			var back record
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("record does not decode: %v: %s", err, b)
			}
			st2 := &state{att: st.att, admin: p.admin, zone: p.zone, policy: p.policy}
			st2.fromRecord(&back)
			if st2.backend != st.backend || st2.admin != st.admin || st2.zone != st.zone || st2.bridge != st.bridge || !reflect.DeepEqual(st2.ips, st.ips) {
				t.Fatalf("record round trip: %+v -> %s -> %+v", st, b, st2)
			}
		}
	})
}
