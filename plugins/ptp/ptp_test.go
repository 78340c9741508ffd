package ptp

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

func run(t *testing.T, hostPath, cmd, conf, id, nsPath string) (string, int) {
	t.Helper()
	env := map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": id, "CNI_NETNS": nsPath, "CNI_IFNAME": "eth0", "CNI_PATH": testutil.RefBin(t)}
	return testutil.RunPlugin(t, Plugin(), hostPath, env, conf)
}

func in(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := testutil.InNS(t, ns, args...)
	if err != nil {
		t.Fatalf("%v in %s: %v: %s", args, ns, err, out)
	}
	return out
}

func conf(t *testing.T, dataDir string, masq bool, subnets ...string) string {
	return testutil.Conf(t, map[string]any{
		"cniVersion": "1.1.0", "name": "ptpnet", "type": "ptp", "ipMasq": masq, "mtu": 1400,
		"ipam": testutil.HostLocal(dataDir, subnets, "0.0.0.0/0", "::/0"),
	}, nil)
}

func TestPtpAddTrafficCheckDel(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "ptph")
	cont, contPath := testutil.NewNS(t, "ptpc")
	dataDir := t.TempDir()
	c := conf(t, dataDir, true, "10.40.0.0/24", "fd00:40::/64")
	out, code := run(t, hostPath, "ADD", c, "p1", contPath)
	if code != 0 {
		t.Fatalf("ADD: %s", out)
	}
	r, err := spec.ParseResult([]byte(out), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Interfaces) != 2 || r.Interfaces[1].Name != "eth0" || r.Interfaces[1].Sandbox != contPath || len(r.IPs) != 2 {
		t.Fatalf("result: %s", out)
	}
	hv := r.Interfaces[0].Name
	for _, ip := range r.IPs {
		if *ip.Interface != 1 {
			t.Errorf("ip %s on interface %d, want 1", ip.Address, *ip.Interface)
		}
	}
	// Host side: gateway /32 and a host route to the container.
	if got := in(t, host, "ip", "-o", "addr", "show", "dev", hv); !strings.Contains(got, "10.40.0.1/32") || !strings.Contains(got, "fd00:40::1/128") {
		t.Errorf("host veth addresses: %s", got)
	}
	if got := in(t, host, "ip", "route", "show", "10.40.0.2"); !strings.Contains(got, "dev "+hv) {
		t.Errorf("host route to container: %q", got)
	}
	// Container side: no on-link subnet, everything via the gateway.
	routes := in(t, cont, "ip", "route", "show")
	for _, want := range []string{"default via 10.40.0.1 dev eth0", "10.40.0.0/24 via 10.40.0.1 dev eth0", "10.40.0.1 dev eth0 scope link"} {
		if !strings.Contains(routes, want) {
			t.Errorf("container routes lack %q:\n%s", want, routes)
		}
	}
	if got := in(t, cont, "ip", "-o", "link", "show", "eth0"); !strings.Contains(got, "mtu 1400") {
		t.Errorf("mtu: %s", got)
	}
	// Traffic both ways, both families.
	for _, p := range [][2]string{{cont, "10.40.0.1"}, {host, "10.40.0.2"}, {cont, "fd00:40::1"}, {host, "fd00:40::2"}} {
		if got, err := testutil.InNS(t, p[0], "ping", "-c", "1", "-W", "2", p[1]); err != nil {
			t.Errorf("ping %s from %s: %v: %s", p[1], p[0], err, got)
		}
	}
	if got := in(t, host, "nft", "list", "chain", "inet", "cni_plugins_masquerade", "masq_checks"); !strings.Contains(got, "ip saddr 10.40.0.2 ip daddr != 10.40.0.0/24 masquerade") {
		t.Errorf("masquerade rule missing:\n%s", got)
	}
	withPrev := strings.TrimSuffix(c, "}") + `,"prevResult":` + strings.TrimSpace(out) + `}`
	if got, code := run(t, hostPath, "CHECK", withPrev, "p1", contPath); code != 0 {
		t.Fatalf("CHECK: %s", got)
	}
	for i := 0; i < 2; i++ {
		if got, code := run(t, hostPath, "DEL", c, "p1", contPath); code != 0 {
			t.Fatalf("DEL #%d: %s", i+1, got)
		}
	}
	if got := in(t, host, "ip", "-o", "link"); strings.Contains(got, hv) {
		t.Errorf("host veth left: %s", got)
	}
	if got := in(t, host, "nft", "list", "chain", "inet", "cni_plugins_masquerade", "masq_checks"); strings.Contains(got, "saddr") {
		t.Errorf("masquerade rule left:\n%s", got)
	}
	if m, _ := filepath.Glob(filepath.Join(dataDir, "ptpnet", "10.*")); len(m) != 0 {
		t.Errorf("IPAM not released: %v", m)
	}
}

func TestPtpRequiresIPAM(t *testing.T) {
	_, hostPath := testutil.NewNS(t, "ptph")
	_, contPath := testutil.NewNS(t, "ptpc")
	out, code := run(t, hostPath, "ADD", `{"cniVersion":"1.1.0","name":"ptpnet","type":"ptp"}`, "p2", contPath)
	if e, ok := spec.ParseError([]byte(out)); code == 0 || !ok || e.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, `"ipam"`) {
		t.Fatalf("ADD without ipam: %s", out)
	}
}
