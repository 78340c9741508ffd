package firewall

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	fw "github.com/patchbay-cni/patchbay/internal/firewall"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig: any configuration and prevResult either is refused with a
// CNI error (code 6 or 7) or renders, in both rule backends, into rules
// that pass the firewall layer's validation and whose iptables-restore
// lines are single printable lines; the record round-trips; the lenient
// parse of DEL never fails. Nothing touches the kernel.
func FuzzConfig(f *testing.F) {
	for _, c := range []string{
		`{"cniVersion":"1.0.0","name":"n","type":"firewall"}`,
		`{"backend":"iptables","ingressPolicy":"same-bridge","iptablesAdminChainName":"MY-ADMIN"}`,
		`{"backend":"nftables","ingressPolicy":"isolated","dataDir":"/run/x"}`,
		`{"backend":"firewalld","firewalldZone":"internal"}`,
		`{"backend":"pf"}`, `{"iptablesAdminChainName":"A\nB"}`, `{"firewalldZone":"a/b/c"}`, `{"backend":5}`,
	} {
		for _, p := range []string{
			`{"cniVersion":"1.0.0","interfaces":[{"name":"br0"},{"name":"veth1"},{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.0.0.2/24","interface":2},{"address":"fd00::2/64"}]}`,
			`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}`,
			`{"cniVersion":"1.0.0","interfaces":[{"name":"-x"}],"ips":[]}`,
			`{"cniVersion":"1.0.0","interfaces":[{"name":"br\"0"}],"ips":[{"address":"::ffff:10.0.0.2/120"}]}`,
		} {
			f.Add([]byte(c), []byte(p))
		}
	}
	f.Fuzz(func(t *testing.T, conf, prev []byte) {
		lenient(conf)
		p, err := parse(conf)
		if err != nil {
			wantCode(t, err, spec.ErrDecodingFailure, spec.ErrInvalidNetworkConfig)
			return
		}
		res, err := spec.ParseResult(prev, "1.0.0")
		if err != nil {
			return
		}
		a := &skel.CmdArgs{Conf: &spec.NetConf{Name: "fuzz"}, IfName: "eth0", ContainerID: "ctr1"}
		r, err := newRequest(a, p, res)
		if err != nil {
			wantCode(t, err, spec.ErrInvalidNetworkConfig)
			return
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
					t.Fatalf("%s: accepted configuration does not render: %v\nconf %s\nprev %s", l.kind, err, conf, prev)
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

func wantCode(t *testing.T, err error, codes ...uint) {
	t.Helper()
	var e *spec.Error
	if !errors.As(err, &e) {
		t.Fatalf("not a CNI error: %v", err)
	}
	for _, c := range codes {
		if e.Code == c {
			if strings.TrimSpace(e.Msg) == "" {
				t.Fatalf("code %d without a message", c)
			}
			return
		}
	}
	t.Fatalf("code %d, want one of %v: %v", e.Code, codes, err)
}
