package bridge

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

func TestAddV4ResultShapeGatewayCheckDel(t *testing.T) {
	h := newHarness(t)
	cont, contPath := h.container()
	conf := h.conf("1.1.0", map[string]any{"isGateway": true, "isDefaultGateway": true}, "10.22.0.0/24")
	r, raw := h.mustAdd(conf, "c1", contPath, "eth0")

	if len(r.Interfaces) != 3 {
		t.Fatalf("want 3 interfaces [bridge, host veth, container], got %s", raw)
	}
	br, hv, ct := r.Interfaces[0], r.Interfaces[1], r.Interfaces[2]
	if br.Name != "pbbr0" || br.Sandbox != "" || br.Mac == "" {
		t.Errorf("bridge interface = %+v", br)
	}
	if !strings.HasPrefix(hv.Name, "veth") || hv.Sandbox != "" || hv.Mac == "" {
		t.Errorf("host veth interface = %+v", hv)
	}
	if ct.Name != "eth0" || ct.Sandbox != contPath || ct.Mac == "" {
		t.Errorf("container interface = %+v", ct)
	}
	if len(r.IPs) != 1 || r.IPs[0].Interface == nil || *r.IPs[0].Interface != 2 {
		t.Fatalf("want one IP on interface 2: %s", raw)
	}
	ip := r.IPs[0]
	if ip.Address != netip.MustParsePrefix("10.22.0.2/24") || ip.Gateway != netip.MustParseAddr("10.22.0.1") {
		t.Errorf("ip = %v gw %v, want 10.22.0.2/24 gw 10.22.0.1", ip.Address, ip.Gateway)
	}
	if len(r.Routes) != 1 || r.Routes[0].Dst.String() != "0.0.0.0/0" || r.Routes[0].GW.String() != "10.22.0.1" {
		t.Errorf("routes = %s, want default via 10.22.0.1", raw)
	}

	// The gateway sits on the bridge, the port is on the bridge, and the
	// MACs reported are the real ones.
	if out := in(t, h.host, "ip", "-o", "addr", "show", "dev", "pbbr0"); !strings.Contains(out, "10.22.0.1/24") {
		t.Errorf("bridge lacks gateway address: %s", out)
	}
	if out := in(t, h.host, "ip", "-o", "link", "show", hv.Name); !strings.Contains(out, "master pbbr0") || !strings.Contains(out, hv.Mac) {
		t.Errorf("host veth not on bridge or MAC differs: %s", out)
	}
	if out := in(t, h.host, "ip", "-o", "link", "show", "pbbr0"); !strings.Contains(out, br.Mac) {
		t.Errorf("bridge MAC differs from result %s: %s", br.Mac, out)
	}
	if out := in(t, cont, "ip", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(out, "10.22.0.2/24") {
		t.Errorf("container lacks address: %s", out)
	}
	if out := in(t, cont, "ip", "route", "show", "default"); !strings.Contains(out, "via 10.22.0.1 dev eth0") {
		t.Errorf("container default route: %q", out)
	}
	if out := in(t, h.host, "sysctl", "-n", "net.ipv4.ip_forward"); out != "1" {
		t.Errorf("forwarding in host netns = %q", out)
	}
	// container -> gateway
	if out, err := testutilPing(t, cont, "10.22.0.1"); err != nil {
		t.Fatalf("ping gateway: %v: %s", err, out)
	}

	// CHECK passes, then fails once the address is gone.
	if out, code := h.run("CHECK", withPrev(t, conf, raw), "c1", contPath, "eth0"); code != 0 {
		t.Fatalf("CHECK failed: %s", out)
	}
	in(t, cont, "ip", "addr", "del", "10.22.0.2/24", "dev", "eth0")
	out, code := h.run("CHECK", withPrev(t, conf, raw), "c1", contPath, "eth0")
	if code == 0 || !strings.Contains(out, "10.22.0.2/24") {
		t.Fatalf("CHECK after removing the address: code %d: %s", code, out)
	}

	// DEL twice: both succeed, veth gone, address released.
	h.mustDel(conf, "c1", contPath, "eth0")
	h.mustDel(conf, "c1", contPath, "eth0")
	if out := in(t, cont, "ip", "-o", "link"); strings.Contains(out, "eth0") {
		t.Errorf("eth0 still in container: %s", out)
	}
	if out := in(t, h.host, "ip", "-o", "link"); strings.Contains(out, hv.Name) {
		t.Errorf("host veth still there: %s", out)
	}
	if a := h.allocated(); len(a) != 0 {
		t.Errorf("IPAM still holds %v", a)
	}
}

func TestAddV6NoDADDelay(t *testing.T) {
	h := newHarness(t)
	cont, contPath := h.container()
	conf := h.conf("1.0.0", map[string]any{"isGateway": true}, "fd00:22::/64")
	start := time.Now()
	r, _ := h.mustAdd(conf, "c6", contPath, "eth0")
	if d := time.Since(start); d > time.Second {
		t.Errorf("ADD took %v: a DAD wait?", d)
	}
	if len(r.IPs) != 1 || r.IPs[0].Address.String() != "fd00:22::2/64" || r.IPs[0].Gateway.String() != "fd00:22::1" {
		t.Fatalf("ips = %+v", r.IPs)
	}
	// The global address is usable at once (nodad); the kernel's own
	// link-local address follows net.ipv6.conf.all.accept_dad, left alone.
	out := in(t, cont, "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "global")
	if !strings.Contains(out, "fd00:22::2/64") || strings.Contains(out, "tentative") {
		t.Errorf("container v6 address missing or tentative: %s", out)
	}
	if got := in(t, cont, "sysctl", "-n", "net.ipv6.conf.eth0.accept_dad"); got != "0" {
		t.Errorf("accept_dad = %s, want 0", got)
	}
	if out := in(t, h.host, "ip", "-6", "-o", "addr", "show", "dev", "pbbr0", "scope", "global"); !strings.Contains(out, "fd00:22::1/64") || strings.Contains(out, "tentative") {
		t.Errorf("bridge v6 gateway missing or tentative: %s", out)
	}
	if out, err := testutilPing(t, cont, "fd00:22::1"); err != nil {
		t.Fatalf("ping v6 gateway: %v: %s", err, out)
	}
	h.mustDel(conf, "c6", contPath, "eth0")
}

func TestDualStack(t *testing.T) {
	h := newHarness(t)
	cont, contPath := h.container()
	conf := h.conf("1.1.0", map[string]any{"isDefaultGateway": true}, "10.23.0.0/24", "fd00:23::/64")
	r, raw := h.mustAdd(conf, "cd", contPath, "eth0")
	if len(r.IPs) != 2 || len(r.Routes) != 2 {
		t.Fatalf("want 2 ips and 2 default routes: %s", raw)
	}
	for _, ip := range r.IPs {
		if *ip.Interface != 2 {
			t.Errorf("ip %s interface %d", ip.Address, *ip.Interface)
		}
	}
	if out := in(t, cont, "ip", "-6", "route", "show", "default"); !strings.Contains(out, "via fd00:23::1") {
		t.Errorf("v6 default route: %q", out)
	}
	if out := in(t, cont, "ip", "-4", "route", "show", "default"); !strings.Contains(out, "via 10.23.0.1") {
		t.Errorf("v4 default route: %q", out)
	}
	if out, code := h.run("CHECK", withPrev(t, conf, raw), "cd", contPath, "eth0"); code != 0 {
		t.Fatalf("CHECK: %s", out)
	}
	h.mustDel(conf, "cd", contPath, "eth0")
}

func TestTwoContainersTalk(t *testing.T) {
	h := newHarness(t)
	a, aPath := h.container()
	_, bPath := h.container()
	conf := h.conf("1.1.0", nil, "10.24.0.0/24")
	ra, _ := h.mustAdd(conf, "ca", aPath, "eth0")
	rb, _ := h.mustAdd(conf, "cb", bPath, "eth0")
	if ra.IPs[0].Address.Addr() == rb.IPs[0].Address.Addr() {
		t.Fatalf("same address twice: %v", ra.IPs[0].Address)
	}
	if out, err := testutilPing(t, a, rb.IPs[0].Address.Addr().String()); err != nil {
		t.Fatalf("a -> b: %v: %s", err, out)
	}
	h.mustDel(conf, "ca", aPath, "eth0")
	h.mustDel(conf, "cb", bPath, "eth0")
}

func TestLayer2Only(t *testing.T) {
	h := newHarness(t)
	cont, contPath := h.container()
	conf := h.conf("1.1.0", nil)
	r, raw := h.mustAdd(conf, "l2", contPath, "eth0")
	if len(r.Interfaces) != 3 || len(r.IPs) != 0 || len(r.Routes) != 0 {
		t.Fatalf("layer 2 result: %s", raw)
	}
	if out := in(t, cont, "ip", "-o", "link", "show", "eth0"); !strings.Contains(out, ",UP") {
		t.Errorf("container interface not up: %s", out)
	}
	if out := in(t, cont, "ip", "-4", "-o", "addr", "show", "dev", "eth0"); out != "" {
		t.Errorf("layer 2 interface has IPv4 addresses: %s", out)
	}
	h.mustDel(conf, "l2", contPath, "eth0")
}

func TestHairpin(t *testing.T) {
	h := newHarness(t)
	_, contPath := h.container()
	conf := h.conf("1.1.0", map[string]any{"hairpinMode": true}, "10.25.0.0/24")
	r, _ := h.mustAdd(conf, "ch", contPath, "eth0")
	if got := in(t, h.host, "cat", "/sys/class/net/"+r.Interfaces[1].Name+"/brport/hairpin_mode"); got != "1" {
		t.Errorf("hairpin_mode = %s", got)
	}
	h.mustDel(conf, "ch", contPath, "eth0")
}

// vlanFilteringWorks probes the kernel: bridge vlan filtering needs
// CONFIG_BRIDGE_VLAN_FILTERING, which this machine's kernel lacks.
func vlanFilteringWorks(t *testing.T, host string) bool {
	_, err := testutil.InNS(t, host, "ip", "link", "add", "pbprobe0", "type", "bridge", "vlan_filtering", "1")
	if err == nil {
		in(t, host, "ip", "link", "del", "pbprobe0")
	}
	return err == nil
}

func TestVlan(t *testing.T) {
	h := newHarness(t)
	cont, contPath := h.container()
	conf := h.conf("1.1.0", map[string]any{"vlan": 100, "isGateway": true}, "10.25.0.0/24")
	if !vlanFilteringWorks(t, h.host) {
		// The ADD must fail cleanly, saying why, and leave nothing behind.
		out, code := h.run("ADD", conf, "cv", contPath, "eth0")
		if code == 0 || !strings.Contains(out, "CONFIG_BRIDGE_VLAN_FILTERING") {
			t.Fatalf("vlan ADD on a kernel without vlan filtering: code %d: %s", code, out)
		}
		if out := in(t, h.host, "ip", "-o", "link"); strings.Count(out, "\n") != 0 {
			t.Errorf("host netns has more than lo: %s", out)
		}
		if out := in(t, cont, "ip", "-o", "link"); strings.Count(out, "\n") != 0 {
			t.Errorf("container netns has more than lo: %s", out)
		}
		t.Log("kernel lacks CONFIG_BRIDGE_VLAN_FILTERING: checked the clean failure only")
		return
	}
	r, raw := h.mustAdd(conf, "cv", contPath, "eth0")
	hv := r.Interfaces[1].Name
	if got := in(t, h.host, "cat", "/sys/class/net/pbbr0/bridge/vlan_filtering"); got != "1" {
		t.Errorf("vlan_filtering = %s", got)
	}
	var vl []struct {
		Ifname string `json:"ifname"`
		Vlans  []struct {
			Vlan  int      `json:"vlan"`
			Flags []string `json:"flags"`
		} `json:"vlans"`
	}
	if err := json.Unmarshal([]byte(in(t, h.host, "bridge", "-j", "vlan", "show", "dev", hv)), &vl); err != nil || len(vl) != 1 {
		t.Fatalf("bridge vlan show: %v %+v", err, vl)
	}
	if len(vl[0].Vlans) != 1 || vl[0].Vlans[0].Vlan != 100 {
		t.Errorf("port vlans = %+v, want only 100 (PVID, untagged)", vl[0].Vlans)
	}
	// With a vlan the gateway lives on pbbr0.100 (a 4th interface).
	if len(r.Interfaces) != 4 || r.Interfaces[3].Name != "pbbr0.100" {
		t.Fatalf("want vlan gateway interface pbbr0.100: %s", raw)
	}
	if out := in(t, h.host, "ip", "-o", "addr", "show", "dev", "pbbr0.100"); !strings.Contains(out, "10.25.0.1/24") {
		t.Errorf("vlan gateway address: %s", out)
	}
	h.mustDel(conf, "cv", contPath, "eth0")
}

func TestDelWithNetnsGone(t *testing.T) {
	h := newHarness(t)
	name, path := looseNS(t)
	conf := h.conf("1.1.0", map[string]any{"ipMasq": true}, "10.26.0.0/24")
	h.mustAdd(conf, "cg", path, "eth0")
	if len(h.allocated()) != 1 {
		t.Fatalf("allocation missing: %v", h.allocated())
	}
	in(t, h.host, "true")
	if out, err := execOut("ip", "netns", "del", name); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	h.mustDel(conf, "cg", path, "eth0")
	h.mustDel(conf, "cg", path, "eth0")
	if a := h.allocated(); len(a) != 0 {
		t.Errorf("IPAM not released: %v", a)
	}
	if rules := masqRules(t, h.host); len(rules) != 0 {
		t.Errorf("masquerade rules left: %v", rules)
	}
}

func TestBadInputCreatesNothing(t *testing.T) {
	h := newHarness(t)
	cont, contPath := h.container()
	for _, tc := range []struct {
		extra map[string]any
		field string
	}{
		{map[string]any{"bridge": "averyveryverylongbr"}, `"bridge"`},
		{map[string]any{"mtu": -1}, `"mtu"`},
		{map[string]any{"mtu": 70000}, `"mtu"`},
		{map[string]any{"vlan": 5000}, `"vlan"`},
		{map[string]any{"ipMasqBackend": "pf"}, `"ipMasqBackend"`},
	} {
		out, code := h.run("ADD", h.conf("1.1.0", tc.extra, "10.27.0.0/24"), "bad", contPath, "eth0")
		if code == 0 {
			t.Fatalf("%v accepted: %s", tc.extra, out)
		}
		e := cniError(t, out)
		if e.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, tc.field) {
			t.Errorf("%v: code %d msg %q, want code 7 naming %s", tc.extra, e.Code, e.Msg, tc.field)
		}
	}
	if out := in(t, h.host, "ip", "-o", "link"); strings.Count(out, "\n") != 0 {
		t.Errorf("host netns has more than lo: %s", out)
	}
	if out := in(t, cont, "ip", "-o", "link"); strings.Count(out, "\n") != 0 {
		t.Errorf("container netns has more than lo: %s", out)
	}
	if a := h.allocated(); len(a) != 0 {
		t.Errorf("IPAM allocated %v", a)
	}
}

func TestResultVersions(t *testing.T) {
	h := newHarness(t)
	for i, tc := range []struct {
		version string
		check   func(map[string]any) bool
	}{
		{"0.2.0", func(m map[string]any) bool { return m["ip4"] != nil && m["interfaces"] == nil }},
		{"0.4.0", func(m map[string]any) bool {
			ips, _ := m["ips"].([]any)
			return len(ips) == 1 && ips[0].(map[string]any)["version"] == "4" && ips[0].(map[string]any)["interface"] == float64(2)
		}},
		{"1.1.0", func(m map[string]any) bool {
			ips, _ := m["ips"].([]any)
			return len(ips) == 1 && ips[0].(map[string]any)["version"] == nil && len(m["interfaces"].([]any)) == 3
		}},
	} {
		_, contPath := h.container()
		conf := h.conf(tc.version, nil, "10.28.0.0/24")
		id := "v" + string(rune('0'+i))
		out, code := h.run("ADD", conf, id, contPath, "eth0")
		if code != 0 {
			t.Fatalf("%s ADD: %s", tc.version, out)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil || m["cniVersion"] != tc.version || !tc.check(m) {
			t.Errorf("%s result: %s", tc.version, out)
		}
		h.mustDel(conf, id, contPath, "eth0")
	}
}

// A failure after IPAM (here: the bridge already has another gateway
// address and forceAddress is off) releases the address and the veth.
func TestAddFailureAfterIPAMReleases(t *testing.T) {
	h := newHarness(t)
	cont, contPath := h.container()
	in(t, h.host, "ip", "link", "add", "pbbr0", "type", "bridge")
	in(t, h.host, "ip", "addr", "add", "10.99.0.1/24", "dev", "pbbr0")
	conf := h.conf("1.1.0", map[string]any{"isGateway": true}, "10.34.0.0/24")
	out, code := h.run("ADD", conf, "ff", contPath, "eth0")
	if code == 0 || !strings.Contains(out, "already has an IP address") {
		t.Fatalf("ADD: code %d: %s", code, out)
	}
	if a := h.allocated(); len(a) != 0 {
		t.Errorf("IPAM not released: %v", a)
	}
	if got := in(t, cont, "ip", "-o", "link"); strings.Contains(got, "eth0") {
		t.Errorf("container veth left: %s", got)
	}
	if got := in(t, h.host, "ip", "-o", "link"); strings.Contains(got, "veth") {
		t.Errorf("host veth left: %s", got)
	}
	// forceAddress replaces the old address.
	conf = h.conf("1.1.0", map[string]any{"isGateway": true, "forceAddress": true}, "10.34.0.0/24")
	h.mustAdd(conf, "ff", contPath, "eth0")
	if got := in(t, h.host, "ip", "-4", "-o", "addr", "show", "dev", "pbbr0"); !strings.Contains(got, "10.34.0.1/24") || strings.Contains(got, "10.99.0.1") {
		t.Errorf("bridge addresses with forceAddress: %s", got)
	}
	h.mustDel(conf, "ff", contPath, "eth0")
}

// enabledad keeps DAD and ADD returns only once the address is usable.
func TestEnableDADWaits(t *testing.T) {
	h := newHarness(t)
	cont, contPath := h.container()
	conf := h.conf("1.1.0", map[string]any{"enabledad": true, "runtimeConfig": map[string]string{"mac": "02:11:22:33:44:55"}}, "fd00:35::/64")
	r, _ := h.mustAdd(conf, "dad", contPath, "eth0")
	if r.Interfaces[2].Mac != "02:11:22:33:44:55" {
		t.Errorf("runtimeConfig.mac not applied: %s", r.Interfaces[2].Mac)
	}
	if got := in(t, cont, "sysctl", "-n", "net.ipv6.conf.eth0.accept_dad"); got != "1" {
		t.Errorf("accept_dad = %s, want 1", got)
	}
	out := in(t, cont, "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "global")
	if !strings.Contains(out, "fd00:35::2/64") || strings.Contains(out, "tentative") || strings.Contains(out, "nodad") {
		t.Errorf("address after DAD: %s", out)
	}
	h.mustDel(conf, "dad", contPath, "eth0")
}
