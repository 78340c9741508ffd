package tuning

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

const allKeys = `"sysctl":{"net.ipv4.conf.IFNAME.arp_notify":"1","net.core.somaxconn":"500","net/ipv4/ip_local_port_range":"20000 30000"},
	"mac":"c2:11:22:33:44:55","mtu":1400,"promisc":true,"allmulti":true,"txQLen":333`

func rootValue(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + rel)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestApplyAndRestore sets every key, checks the interface, the sysctls and
// the result, CHECKs, then DELs twice and finds everything as it was.
func TestApplyAndRestore(t *testing.T) {
	f := newFixture(t)
	rootSomaxconn := rootValue(t, "net/core/somaxconn")
	before := f.link(t, "eth0")
	peerBefore := f.link(t, "peer0")
	sysBefore := map[string]string{}
	for _, k := range []string{"net/ipv4/conf/eth0/arp_notify", "net/core/somaxconn", "net/ipv4/ip_local_port_range"} {
		sysBefore[k] = f.sysctl(t, k)
	}

	conf := f.conf("1.1.0", allKeys, f.prevResult("1.1.0"))
	res := f.mustAdd(t, conf)

	l := f.link(t, "eth0")
	if l.Address != "c2:11:22:33:44:55" || l.MTU != 1400 || !l.promisc() || !l.allmulti() || l.TxQLen != 333 {
		t.Errorf("eth0 after ADD: %+v", l)
	}
	for k, want := range map[string]string{"net/ipv4/conf/eth0/arp_notify": "1", "net/core/somaxconn": "500", "net/ipv4/ip_local_port_range": "20000\t30000"} {
		if got := f.sysctl(t, k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if got := rootValue(t, "net/core/somaxconn"); got != rootSomaxconn {
		t.Fatalf("the root namespace's somaxconn changed: %s -> %s", rootSomaxconn, got)
	}
	if p := f.link(t, "peer0"); p.MTU != peerBefore.MTU || p.promisc() {
		t.Errorf("peer0 was touched: %+v", p)
	}
	macs := ifaceMACs(t, res)
	want := map[string]string{"cni0": "00:11:22:33:44:55", "veth3243": "55:44:33:22:11:11", "eth0": "c2:11:22:33:44:55"}
	if !mapsEqual(macs, want) {
		t.Errorf("result macs %v, want %v", macs, want)
	}
	if !f.hasSaved() {
		t.Errorf("no saved values at %s", f.savedFile())
	}

	// CHECK gets the ADD result as prevResult, as a runtime passes it.
	f.mustSucceed(t, "CHECK", f.conf("1.1.0", allKeys, mustJSON(t, res)))

	del := f.conf("1.1.0", allKeys, "")
	f.mustSucceed(t, "DEL", del)
	after := f.link(t, "eth0")
	if after.Address != before.Address || after.MTU != before.MTU || after.promisc() != before.promisc() ||
		after.allmulti() != before.allmulti() || after.TxQLen != before.TxQLen {
		t.Errorf("eth0 not restored: before %+v, after %+v", before, after)
	}
	for k, v := range sysBefore {
		if got := f.sysctl(t, k); got != v {
			t.Errorf("%s = %q after DEL, want %q", k, got, v)
		}
	}
	if f.hasSaved() {
		t.Error("saved values left after DEL")
	}
	f.mustSucceed(t, "DEL", del) // idempotent
}

func TestMACSources(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name, keys, cniArgs, want string
	}{
		{"config", `"mac":"c2:00:00:00:00:01"`, "", "c2:00:00:00:00:01"},
		{"CNI_ARGS over config", `"mac":"c2:00:00:00:00:01"`, "IgnoreUnknown=1;MAC=c2:00:00:00:00:02;K8S_POD_NAME=x", "c2:00:00:00:00:02"},
		{"runtimeConfig over CNI_ARGS", `"mac":"c2:00:00:00:00:01","runtimeConfig":{"mac":"C2:00:00:00:00:03"}`, "MAC=c2:00:00:00:00:02", "c2:00:00:00:00:03"},
		{"args.cni over runtimeConfig", `"runtimeConfig":{"mac":"c2:00:00:00:00:03"},"args":{"cni":{"mac":"c2:00:00:00:00:04"}}`, "", "c2:00:00:00:00:04"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conf := f.conf("1.1.0", c.keys, f.prevResult("1.1.0"))
			res := f.mustAdd(t, conf, "CNI_ARGS="+c.cniArgs)
			if got := f.link(t, "eth0").Address; got != c.want {
				t.Errorf("eth0 mac %s, want %s", got, c.want)
			}
			if got := ifaceMACs(t, res)["eth0"]; got != c.want {
				t.Errorf("result mac %s, want %s", got, c.want)
			}
			f.mustSucceed(t, "DEL", conf, "CNI_ARGS="+c.cniArgs)
			if got := f.link(t, "eth0").Address; got != f.mac {
				t.Errorf("mac after DEL %s, want %s", got, f.mac)
			}
		})
	}
}

// TestArgsOverride: args.cni overrides sysctl, mtu, promisc, allmulti, txQLen.
func TestArgsOverride(t *testing.T) {
	f := newFixture(t)
	keys := `"mtu":1400,"promisc":true,"sysctl":{"net.ipv4.conf.IFNAME.arp_notify":"1"},
		"args":{"cni":{"mtu":1300,"promisc":false,"allmulti":true,"txQLen":77,"sysctl":{"net.ipv4.conf.IFNAME.arp_notify":"0","net.core.somaxconn":"600"}}}`
	conf := f.conf("1.1.0", keys, f.prevResult("1.1.0"))
	f.mustAdd(t, conf)
	l := f.link(t, "eth0")
	if l.MTU != 1300 || l.promisc() || !l.allmulti() || l.TxQLen != 77 {
		t.Errorf("eth0: %+v", l)
	}
	if got := f.sysctl(t, "net/ipv4/conf/eth0/arp_notify"); got != "0" {
		t.Errorf("arp_notify %s", got)
	}
	if got := f.sysctl(t, "net/core/somaxconn"); got != "600" {
		t.Errorf("somaxconn %s", got)
	}
	f.mustSucceed(t, "CHECK", conf)
	f.mustSucceed(t, "DEL", conf)
}

func TestCheckDetectsChanges(t *testing.T) {
	f := newFixture(t)
	conf := f.conf("1.1.0", allKeys, f.prevResult("1.1.0"))
	res := f.mustAdd(t, conf)
	check := f.conf("1.1.0", allKeys, mustJSON(t, res))
	f.mustSucceed(t, "CHECK", check)

	steps := []struct {
		change, undo []string
		mention      string
	}{
		{[]string{"link", "set", "eth0", "mtu", "1500"}, []string{"link", "set", "eth0", "mtu", "1400"}, "mtu"},
		{[]string{"link", "set", "eth0", "address", "c2:99:99:99:99:99"}, []string{"link", "set", "eth0", "address", "c2:11:22:33:44:55"}, "mac"},
		{[]string{"link", "set", "eth0", "promisc", "off"}, []string{"link", "set", "eth0", "promisc", "on"}, "promisc"},
		{[]string{"link", "set", "eth0", "allmulticast", "off"}, []string{"link", "set", "eth0", "allmulticast", "on"}, "allmulti"},
		{[]string{"link", "set", "eth0", "txqueuelen", "1000"}, []string{"link", "set", "eth0", "txqueuelen", "333"}, "txQLen"},
	}
	for _, s := range steps {
		f.ip(t, s.change...)
		f.expectError(t, "CHECK", check, 999, s.mention, "eth0")
		f.ip(t, s.undo...)
		f.mustSucceed(t, "CHECK", check)
	}
	if out, err := testutil.InNS(t, f.ns, "sh", "-c", "echo 128 > /proc/sys/net/core/somaxconn"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	f.expectError(t, "CHECK", check, 999, "net.core.somaxconn", `"128"`, `"500"`)
	if out, err := testutil.InNS(t, f.ns, "sh", "-c", "echo 500 > /proc/sys/net/core/somaxconn"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// A prevResult that does not report the configured MAC fails too.
	f.expectError(t, "CHECK", f.conf("1.1.0", allKeys, f.prevResult("1.1.0")), 999, "prevResult", "mac")
	f.mustSucceed(t, "DEL", conf)
}

func TestRefusedSysctls(t *testing.T) {
	f := newFixture(t)
	rootForward := rootValue(t, "net/ipv4/ip_forward")
	cases := []struct{ key, why string }{
		{"kernel.hostname", "net.*"},
		{"vm.swappiness", "net.*"},
		{"/proc/sys/net/ipv4/ip_forward", "absolute"},
		{"net/../kernel/hostname", "traversal"},
		{"net/ipv4/conf/eth0/../../../../kernel/hostname", "traversal"},
		{"net..ipv4.ip_forward", "traversal"},
		{"net.ipv4.conf.peer0.arp_notify", `"peer0"`},
		{"net.ipv4.conf.lo.forwarding", `"lo"`},
		{"net.ipv6.neigh.peer0.mcast_solicit", `"peer0"`},
		{"net.core.no_such_key", "no such key"},
		{"net.core.rmem_max", "read-only"}, // global: read-only in a child namespace
		{"net.ipv4", "directory"},
	}
	for _, c := range cases {
		t.Run(c.key, func(t *testing.T) {
			keys := `"sysctl":{"` + c.key + `":"1","net.core.somaxconn":"777"},"mtu":1300`
			f.expectError(t, "ADD", f.conf("1.1.0", keys, f.prevResult("1.1.0")), 7, c.key, `"1"`, c.why)
			if got := f.sysctl(t, "net/core/somaxconn"); got == "777" {
				t.Error("a sysctl was applied although the config was refused")
			}
			if got := f.link(t, "eth0").MTU; got == 1300 {
				t.Error("mtu was applied although the config was refused")
			}
			if f.hasSaved() {
				t.Error("saved values left after a refused ADD")
			}
			// The runtime cleans up a failed ADD with DEL: it must succeed.
			f.mustSucceed(t, "DEL", f.conf("1.1.0", keys, ""))
		})
	}
	if got := rootValue(t, "net/ipv4/ip_forward"); got != rootForward {
		t.Fatalf("root ip_forward changed: %s -> %s", rootForward, got)
	}
}

func TestBadValues(t *testing.T) {
	f := newFixture(t)
	prev := f.prevResult("1.1.0")
	f.expectError(t, "ADD", f.conf("1.1.0", `"mac":"zz:11"`, prev), 7, "mac", "zz:11")
	f.expectError(t, "ADD", f.conf("1.1.0", `"runtimeConfig":{"mac":"01:02:03"}`, prev), 7, "runtimeConfig.mac", "01:02:03")
	f.expectError(t, "ADD", f.conf("1.1.0", `"mtu":-5`, prev), 7, "mtu", "-5")
	f.expectError(t, "ADD", f.conf("1.1.0", `"txQLen":-1`, prev), 7, "txQLen", "-1")
	f.expectError(t, "ADD", f.conf("1.1.0", `"sysctl":{"net.core.somaxconn":"1","net.core.somaxconn":"2"}`, prev), 7, "net.core.somaxconn", "more than once")
	f.expectError(t, "ADD", f.conf("1.1.0", `"mtu":1400`, ""), 7, "prevResult")
	if out, code := f.run(t, "ADD", f.conf("1.1.0", "", prev), "CNI_ARGS=MAC=nope"); code == 0 || !strings.Contains(out, `"code":4`) || !strings.Contains(out, "nope") {
		t.Errorf("bad CNI_ARGS MAC: %s", out)
	}

	// The kernel refuses this MTU after the sysctl was written: the ADD
	// must put the sysctl back and leave no saved file.
	somaxconn := f.sysctl(t, "net/core/somaxconn")
	f.expectError(t, "ADD", f.conf("1.1.0", `"sysctl":{"net.core.somaxconn":"900"},"mac":"c2:00:00:00:00:09","mtu":70000`, prev), 7, "mtu", "70000")
	if got := f.sysctl(t, "net/core/somaxconn"); got != somaxconn {
		t.Errorf("somaxconn %s after failed ADD, want %s", got, somaxconn)
	}
	if got := f.link(t, "eth0").Address; got != f.mac {
		t.Errorf("mac %s after failed ADD, want %s", got, f.mac)
	}
	if f.hasSaved() {
		t.Error("saved values left after a failed ADD")
	}
	if out, code := f.run(t, "ADD", f.conf("1.1.0", `"mtu":1400`, prev), "CNI_IFNAME=eth1"); code == 0 || !strings.Contains(out, `eth1\" not found`) {
		t.Errorf("ADD on a missing interface: %s", out)
	}
}

func TestDelWhenGone(t *testing.T) {
	f := newFixture(t)
	conf := f.conf("1.1.0", allKeys, f.prevResult("1.1.0"))

	// Interface gone: the namespace-wide sysctl is still restored.
	somaxconn := f.sysctl(t, "net/core/somaxconn")
	f.mustAdd(t, conf)
	f.ip(t, "link", "del", "eth0")
	f.mustSucceed(t, "DEL", conf)
	if got := f.sysctl(t, "net/core/somaxconn"); got != somaxconn {
		t.Errorf("somaxconn %s, want %s", got, somaxconn)
	}
	if f.hasSaved() {
		t.Error("saved values left")
	}

	// Namespace gone (deleted for real), or CNI_NETNS empty.
	name := "pbt-tungone-" + filepath.Base(f.dataDir)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	g := &fixture{ns: name, path: "/run/netns/" + name, dataDir: f.dataDir}
	g.ip(t, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
	g.mac = g.link(t, "eth0").Address
	g.mustAdd(t, g.conf("1.1.0", allKeys, g.prevResult("1.1.0")))
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	g.mustSucceed(t, "DEL", conf)
	g.mustSucceed(t, "DEL", conf, "CNI_NETNS=")
	if g.hasSaved() {
		t.Error("saved values left after DEL without a namespace")
	}
}

func TestVersion020(t *testing.T) {
	f := newFixture(t)
	conf := f.conf("0.2.0", `"mac":"c2:00:00:00:00:20","mtu":1450`, f.prevResult("0.2.0"))
	out, code := f.run(t, "ADD", conf)
	if code != 0 {
		t.Fatalf("ADD: %s", out)
	}
	jsonEqual(t, out, `{"cniVersion":"0.2.0","ip4":{"ip":"10.1.0.5/16","gateway":"10.1.0.1"},"dns":{"nameservers":["10.1.0.1"]}}`)
	if l := f.link(t, "eth0"); l.Address != "c2:00:00:00:00:20" || l.MTU != 1450 {
		t.Errorf("eth0: %+v", l)
	}
	f.mustSucceed(t, "DEL", conf)
	if l := f.link(t, "eth0"); l.Address != f.mac || l.MTU != 1500 {
		t.Errorf("eth0 after DEL: %+v", l)
	}
}

func TestAllowlist(t *testing.T) {
	f := newFixture(t)
	list := filepath.Join(t.TempDir(), "allowlist.conf")
	if err := os.WriteFile(list, []byte("^net\\.ipv4\\.conf\\.IFNAME\\.\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := allowlistPath
	allowlistPath = list
	t.Cleanup(func() { allowlistPath = old })
	f.expectError(t, "ADD", f.conf("1.1.0", `"sysctl":{"net.core.somaxconn":"500"}`, f.prevResult("1.1.0")), 7, "net.core.somaxconn", "allow")
	conf := f.conf("1.1.0", `"sysctl":{"net.ipv4.conf.IFNAME.arp_notify":"1"}`, f.prevResult("1.1.0"))
	f.mustAdd(t, conf)
	f.mustSucceed(t, "DEL", conf)
}

func TestStatus(t *testing.T) {
	f := newFixture(t)
	f.mustSucceed(t, "STATUS", f.conf("1.1.0", "", ""))
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestSpecExample replays the spec's "Appendix: Examples" tuning call:
// the result is prevResult with the container interface's mac changed.
func TestSpecExample(t *testing.T) {
	f := newFixture(t)
	prev := `{"ips":[{"address":"10.1.0.5/16","gateway":"10.1.0.1","interface":2}],
		"routes":[{"dst":"0.0.0.0/0"}],
		"interfaces":[{"name":"cni0","mac":"00:11:22:33:44:55"},{"name":"veth3243","mac":"55:44:33:22:11:11"},
			{"name":"eth0","mac":"99:88:77:66:55:44","sandbox":"/var/run/netns/blue"}],
		"dns":{"nameservers":["10.1.0.1"]}}`
	conf := `{"cniVersion":"1.1.0","name":"dbnet","type":"tuning","dataDir":"` + f.dataDir + `",
		"sysctl":{"net.core.somaxconn":"500"},"runtimeConfig":{"mac":"00:11:22:33:44:66"},"prevResult":` + prev + `}`
	out, code := f.run(t, "ADD", conf)
	if code != 0 {
		t.Fatalf("ADD: %s", out)
	}
	jsonEqual(t, out, `{"cniVersion":"1.1.0","ips":[{"address":"10.1.0.5/16","gateway":"10.1.0.1","interface":2}],
		"routes":[{"dst":"0.0.0.0/0"}],
		"interfaces":[{"name":"cni0","mac":"00:11:22:33:44:55"},{"name":"veth3243","mac":"55:44:33:22:11:11"},
			{"name":"eth0","mac":"00:11:22:33:44:66","sandbox":"/var/run/netns/blue"}],
		"dns":{"nameservers":["10.1.0.1"]}}`)
	if got := f.sysctl(t, "net/core/somaxconn"); got != "500" {
		t.Errorf("somaxconn %s", got)
	}
	f.mustSucceed(t, "DEL", conf)
}
