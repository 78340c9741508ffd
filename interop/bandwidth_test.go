package interop

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// ifbOf returns the ifb device a bandwidth result lists (a host
// interface named bwp...).
func ifbOf(r *spec.Result) string {
	for _, in := range r.Interfaces {
		if in.Sandbox == "" && strings.HasPrefix(in.Name, "bwp") {
			return in.Name
		}
	}
	return ""
}

func linkExists(t *testing.T, ns, name string) bool {
	_, err := testutil.InNS(t, ns, "ip", "link", "show", "dev", name)
	return err == nil
}

// TestCnitoolPtpBandwidth: the reference cnitool drives our ptp +
// bandwidth (the bandwidth capability in CAP_ARGS) at every version that
// has interfaces in results: the ifb device is made and listed, CHECK
// passes where the version has it, DEL leaves no ifb and no qdisc.
func TestCnitoolPtpBandwidth(t *testing.T) {
	hostNS, _ := testutil.NewNS(t, "bwptph")
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			_, ctrPath := testutil.NewNS(t, "bwptpc")
			confDir := t.TempDir()
			net := "bwptp" + strings.ReplaceAll(v, ".", "")
			conf := fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[
				{"type":"ptp","ipam":{"type":"host-local","dataDir":%q,"subnet":"10.41.0.0/24"}},
				{"type":"bandwidth","capabilities":{"bandwidth":true}}]}`, v, net, filepath.Join(confDir, "ipam"))
			if err := os.WriteFile(filepath.Join(confDir, "10-bw.conflist"), []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			env := []string{`CAP_ARGS={"bandwidth":{"ingressRate":4000000,"ingressBurst":131072,"egressRate":8000000,"egressBurst":131072}}`}
			out, err := cnitoolEnv(t, hostNS, confDir, env, "add", net, ctrPath)
			if err != nil {
				t.Fatalf("cnitool add: %v\n%s", err, out)
			}
			r, err := spec.ParseResult([]byte(out), "")
			if err != nil {
				t.Fatalf("cnitool add result: %v\n%s", err, out)
			}
			ifb := ifbOf(r)
			if ifb == "" || !linkExists(t, hostNS, ifb) {
				t.Fatalf("no ifb device listed and present after ADD:\n%s", out)
			}
			hostVeth := r.Interfaces[0].Name
			if q, _ := testutil.InNS(t, hostNS, "tc", "qdisc", "show", "dev", hostVeth); !strings.Contains(q, "tbf 1: root") || !strings.Contains(q, "rate 4Mbit") {
				t.Errorf("host veth %s qdiscs: %s", hostVeth, q)
			}
			if spec.VerbSupported(v, spec.CmdCheck) {
				if out, err := cnitoolEnv(t, hostNS, confDir, env, "check", net, ctrPath); err != nil {
					t.Errorf("cnitool check: %v\n%s", err, out)
				}
			}
			if out, err := cnitoolEnv(t, hostNS, confDir, env, "del", net, ctrPath); err != nil {
				t.Fatalf("cnitool del: %v\n%s", err, out)
			}
			if linkExists(t, hostNS, ifb) || linkExists(t, hostNS, hostVeth) {
				t.Errorf("ifb %s or veth %s left after DEL", ifb, hostVeth)
			}
		})
	}
}

// TestCnitoolBridgeBandwidthShapes: two containers on one bridge, attached
// by the reference cnitool through our bridge + host-local + bandwidth;
// the first is shaped (egress 8 Mbit/s, ingress 4 Mbit/s), the second is
// not. TCP between them runs at the first one's rates, in each direction.
func TestCnitoolBridgeBandwidthShapes(t *testing.T) {
	hostNS, _ := testutil.NewNS(t, "bwbrh")
	_, aPath := testutil.NewNS(t, "bwbra")
	_, bPath := testutil.NewNS(t, "bwbrb")
	confDir := t.TempDir()
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"bwbridge","plugins":[
		{"type":"bridge","bridge":"bwbr0","isGateway":true,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.42.0.0/24"}],[{"subnet":"fd00:42::/64"}]]}},
		{"type":"bandwidth","capabilities":{"bandwidth":true}}]}`, filepath.Join(confDir, "ipam"))
	if err := os.WriteFile(filepath.Join(confDir, "10-bw.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	const ingress, egress = 4_000_000, 8_000_000
	shaped := []string{fmt.Sprintf(`CAP_ARGS={"bandwidth":{"ingressRate":%d,"ingressBurst":131072,"egressRate":%d,"egressBurst":131072}}`, ingress, egress)}
	add := func(path string, env []string) *spec.Result {
		t.Helper()
		out, err := cnitoolEnv(t, hostNS, confDir, env, "add", "bwbridge", path)
		if err != nil {
			t.Fatalf("cnitool add: %v\n%s", err, out)
		}
		r, err := spec.ParseResult([]byte(out), "")
		if err != nil {
			t.Fatalf("result: %v\n%s", err, out)
		}
		return r
	}
	ra := add(aPath, shaped)
	rb := add(bPath, nil)
	if ifbOf(ra) == "" || ifbOf(rb) != "" {
		t.Fatalf("ifb devices: shaped container %q, unshaped %q", ifbOf(ra), ifbOf(rb))
	}
	addrOf := func(r *spec.Result, v4 bool) netip.Addr {
		for _, ip := range r.IPs {
			if ip.Address.Addr().Is4() == v4 {
				return ip.Address.Addr()
			}
		}
		t.Fatalf("no address of that family in %+v", r.IPs)
		return netip.Addr{}
	}
	for _, m := range []struct {
		what     string
		from, to string
		dst      netip.Addr
		limit    float64
	}{
		{"shaped -> unshaped (shaped egress), IPv4", aPath, bPath, addrOf(rb, true), egress},
		{"unshaped -> shaped (shaped ingress), IPv4", bPath, aPath, addrOf(ra, true), ingress},
		{"shaped -> unshaped (shaped egress), IPv6", aPath, bPath, addrOf(rb, false), egress},
	} {
		got := testutil.Throughput(t, m.from, m.to, netip.AddrPortFrom(m.dst, 5301), 1500*time.Millisecond, 2*time.Second)
		t.Logf("%s: %.2f Mbit/s, limit %.2f (%.0f%%)", m.what, got/1e6, m.limit/1e6, 100*got/m.limit)
		if got < 0.7*m.limit || got > 1.01*m.limit {
			t.Errorf("%s: %.2f Mbit/s, want 70%%..101%% of %.2f Mbit/s", m.what, got/1e6, m.limit/1e6)
		}
	}
	for _, c := range []struct {
		path string
		env  []string
	}{{aPath, shaped}, {bPath, nil}} {
		if out, err := cnitoolEnv(t, hostNS, confDir, c.env, "check", "bwbridge", c.path); err != nil {
			t.Errorf("cnitool check: %v\n%s", err, out)
		}
		if out, err := cnitoolEnv(t, hostNS, confDir, c.env, "del", "bwbridge", c.path); err != nil {
			t.Errorf("cnitool del: %v\n%s", err, out)
		}
	}
	if links, _ := testutil.InNS(t, hostNS, "ip", "-o", "link", "show"); strings.Contains(links, "bwp") || strings.Contains(links, "veth") {
		t.Errorf("left after DEL:\n%s", links)
	}
}
