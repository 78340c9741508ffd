package portmap

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/firewall"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig: portmap's configuration parsing and validation never panics
// and refuses with code 6 or 7 only; whatever it accepts renders in the
// chosen backend, and an iptables rendering is nothing but restore
// commands, one per line (no value can start a line of its own).
func FuzzConfig(f *testing.F) {
	pm := []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}, {"hostPort": 53, "containerPort": 53, "protocol": "udp", "hostIP": "192.0.2.1"}}
	for _, extra := range []map[string]any{
		{},
		{"backend": "iptables"},
		{"backend": "iptables", "snat": false, "masqAll": true, "markMasqBit": 31},
		{"externalSetMarkChain": "KUBE-MARK-MASQ"},
		{"externalSetMarkChain": "EXT-MARK\nCOMMIT\n*filter\n-F\nCOMMIT\n*nat"},
		{"conditionsV4": []string{"-s", "10.0.0.0/8", "!", "-i", "eth+"}, "conditionsV6": []string{"-d", "2001:db8::/32"}},
		{"conditionsV4": []string{"-s", "10.0.0.0/8\nCOMMIT\n*filter\n-I", "INPUT", "-j", "DROP\nCOMMIT\n*nat"}},
		{"conditionsV4": []string{"-m", "conntrack", "--ctstate", "NEW", "-j", "ACCEPT"}},
		{"conditionsV4": []string{"ip saddr != 192.0.2.0/24", "iifname eth0"}, "conditionsV6": []string{"ip6 daddr 2001:db8::1"}},
		{"conditionsV4": []string{"ip saddr 10.0.0.1\ncounter"}},
		{"markMasqBit": 32},
		{"backend": "ebpf"},
		{"name": "net\n*filter"},
	} {
		m := map[string]any{"cniVersion": "1.0.0", "name": "pmfuzz", "type": "portmap", "runtimeConfig": map[string]any{"portMappings": pm}}
		for k, v := range extra {
			m[k] = v
		}
		b, err := json.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	prev := &spec.Result{
		Interfaces: []*spec.Interface{{Name: "veth0"}, {Name: "eth0", Sandbox: "/run/netns/x"}},
		IPs: []*spec.IPConfig{
			{Interface: spec.IntPtr(1), Address: netip.MustParsePrefix("192.0.2.12/28")},
			{Interface: spec.IntPtr(1), Address: netip.MustParsePrefix("2001:db8:10::2/64")},
		},
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		p, err := parse(&skel.CmdArgs{StdinData: stdin, ContainerID: "ctr0", IfName: "eth0"})
		if err != nil {
			var se *spec.Error
			if !errors.As(err, &se) || (se.Code != spec.ErrInvalidNetworkConfig && se.Code != spec.ErrDecodingFailure) {
				t.Fatalf("refused without code 6 or 7: %v", err)
			}
			return
		}
		if err := p.req.setContainer(prev, "eth0"); err != nil {
			var se *spec.Error
			if !errors.As(err, &se) || se.Code != spec.ErrInvalidNetworkConfig {
				t.Fatalf("setContainer: %v", err)
			}
			return
		}
		lines, err := firewall.DryRun(p.backend, rulesets(p.backend, &p.req)...)
		if err != nil {
			t.Fatalf("an accepted configuration does not render: %v\n%s", err, stdin)
		}
		if p.backend != backendIPT {
			return
		}
		for _, l := range lines {
			ok := l == "COMMIT" || l == "*nat" || strings.HasPrefix(l, ":PB-") || strings.HasPrefix(l, "-A ") ||
				strings.HasPrefix(l, "-I ") || strings.HasPrefix(l, "-D ") || strings.HasPrefix(l, "-F PB-") || strings.HasPrefix(l, "-X PB-")
			if !ok {
				t.Fatalf("restore line %q is not one of ours\nconfig: %s", l, stdin)
			}
		}
	})
}
