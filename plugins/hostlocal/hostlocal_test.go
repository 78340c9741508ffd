package hostlocal

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestAddV4Defaults(t *testing.T) {
	dir := t.TempDir()
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(resolv, []byte("# c\nnameserver 10.0.0.53\nnameserver 10.0.0.54\ndomain example.test\nsearch a.test b.test\noptions ndots:2\n"), 0o644)
	conf := testConf(dir, `"subnet":"10.1.2.0/24","resolvConf":"`+resolv+`","routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.1.2.254"}]`)
	r := mustAdd(t, conf, "c1")
	if got := addrs(r); !reflect.DeepEqual(got, []string{"10.1.2.2/24"}) {
		t.Fatalf("addresses %v, want [10.1.2.2/24] (the .1 gateway is never allocated)", got)
	}
	if r.IPs[0].Gateway.String() != "10.1.2.1" || r.IPs[0].Interface != nil || len(r.Interfaces) != 0 {
		t.Errorf("gateway %v interface %v interfaces %v", r.IPs[0].Gateway, r.IPs[0].Interface, r.Interfaces)
	}
	if len(r.Routes) != 2 || r.Routes[1].GW.String() != "10.1.2.254" {
		t.Errorf("routes %v", r.Routes)
	}
	if !reflect.DeepEqual(r.DNS.Nameservers, []string{"10.0.0.53", "10.0.0.54"}) || r.DNS.Domain != "example.test" ||
		!reflect.DeepEqual(r.DNS.Search, []string{"a.test", "b.test"}) || !reflect.DeepEqual(r.DNS.Options, []string{"ndots:2"}) {
		t.Errorf("dns %+v", r.DNS)
	}
	if got := readIPFile(t, dir, "10.1.2.2"); got != "c1\r\neth0" {
		t.Errorf("per-IP file holds %q, want the reference's %q", got, "c1\r\neth0")
	}
	if got := addrs(mustAdd(t, conf, "c2")); got[0] != "10.1.2.3/24" {
		t.Errorf("second ADD got %v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "testnet", "last_reserved_ip.0")); string(b) != "10.1.2.3" {
		t.Errorf("last_reserved_ip.0 = %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "testnet", "lock")); err != nil {
		t.Error(err)
	}
	// Same attachment again: refused, like the reference.
	wantErr(t, call{cmd: "ADD", id: "c1"}, conf, 7, "duplicate allocation", "10.1.2.2")
	// 0.2.0 results come out in the old shape through the SDK.
	old := strings.Replace(conf, `"1.1.0"`, `"0.2.0"`, 1)
	out, code := run(t, call{cmd: "ADD", id: "c3"}, old)
	if code != 0 || !strings.Contains(out, `"ip4":{"ip":"10.1.2.4/24","gateway":"10.1.2.1"`) {
		t.Errorf("0.2.0 ADD: %s", out)
	}
}

func TestV6AndDualStack(t *testing.T) {
	dir := t.TempDir()
	conf := testConf(dir, `"ranges":[[{"subnet":"10.9.0.0/16"}],[{"subnet":"2001:db8:9::/64","gateway":"2001:db8:9::fe"}]]`)
	r := mustAdd(t, conf, "c1")
	want := []string{"10.9.0.2/16", "2001:db8:9::1/64"}
	if got := addrs(r); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	if r.IPs[1].Gateway.String() != "2001:db8:9::fe" {
		t.Errorf("v6 gateway %v", r.IPs[1].Gateway)
	}
	// v6 files are named by the address as Go prints it, as the reference names them.
	if got := readIPFile(t, dir, "2001:db8:9::1"); got != "c1\r\neth0" {
		t.Errorf("v6 file %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "testnet", "last_reserved_ip.1")); string(b) != "2001:db8:9::1" {
		t.Errorf("last_reserved_ip.1 = %q", b)
	}
	mustVerb(t, "DEL", conf, "c1")
	if readIPFile(t, dir, "2001:db8:9::1") != "" || readIPFile(t, dir, "10.9.0.2") != "" {
		t.Error("DEL left files behind")
	}
	// Round-robin: the next ADD continues after the last reserved address.
	if got := addrs(mustAdd(t, conf, "c2")); !reflect.DeepEqual(got, []string{"10.9.0.3/16", "2001:db8:9::2/64"}) {
		t.Errorf("after DEL got %v", got)
	}
}

func TestRangeSetsAndExhaustion(t *testing.T) {
	dir := t.TempDir()
	// One range set of two ranges: .5-.6 of the first /29, then .2-.3 of the second.
	conf := testConf(dir, `"ranges":[[{"subnet":"10.0.0.0/29","rangeStart":"10.0.0.5","rangeEnd":"10.0.0.6"},{"subnet":"10.0.1.0/29","rangeEnd":"10.0.1.3"}]]`)
	mustVerb(t, "STATUS", conf, "")
	var got []string
	for _, id := range []string{"a", "b", "c", "d"} {
		got = append(got, addrs(mustAdd(t, conf, id))...)
	}
	want := []string{"10.0.0.5/29", "10.0.0.6/29", "10.0.1.2/29", "10.0.1.3/29"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	wantErr(t, call{cmd: "ADD", id: "e"}, conf, 11, "no IP addresses available", "range set 0", "10.0.0.5-10.0.0.6,10.0.1.1-10.0.1.3")
	wantErr(t, call{cmd: "STATUS"}, conf, 50, "no free addresses", "range set 0")
	mustVerb(t, "DEL", conf, "b")
	mustVerb(t, "STATUS", conf, "")
	if got := addrs(mustAdd(t, conf, "e")); got[0] != "10.0.0.6/29" {
		t.Errorf("after freeing .6 got %v", got)
	}

	// Two range sets: a failure in the second releases the first.
	dir2 := t.TempDir()
	conf2 := testConf(dir2, `"ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"10.2.0.0/30"}]]`)
	mustAdd(t, conf2, "x") // takes 10.2.0.2, the only address of the /30 besides the gateway
	wantErr(t, call{cmd: "ADD", id: "y"}, conf2, 11, "range set 1")
	if readIPFile(t, dir2, "10.1.0.3") != "" {
		t.Error("failed ADD kept its address in range set 0")
	}
	wantErr(t, call{cmd: "STATUS"}, conf2, 50, "range set 1")
}

func TestValidation(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, ipam string
		parts      []string
	}{
		{"no ranges", `"routes":[]`, []string{"no IP ranges"}},
		{"bad subnet", `"subnet":"10.0.0.0/33"`, []string{"ipam.subnet", "10.0.0.0/33"}},
		{"host bits", `"subnet":"10.0.0.5/24"`, []string{"ipam.subnet", "10.0.0.5/24", "host bits"}},
		{"slash 31", `"subnet":"10.0.0.0/31"`, []string{"ipam.subnet", "too small"}},
		{"slash 32", `"ranges":[[{"subnet":"10.0.0.0/32"}]]`, []string{"ipam.ranges[0][0].subnet", "too small"}},
		{"slash 127", `"ranges":[[{"subnet":"2001:db8::/127"}]]`, []string{"too small"}},
		{"start outside", `"subnet":"10.0.0.0/24","rangeStart":"10.0.1.5"`, []string{"ipam.rangeStart", "10.0.1.5", "10.0.0.0/24"}},
		{"end outside", `"ranges":[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.3.1"}]]`, []string{"ipam.ranges[0][0].rangeEnd", "10.0.3.1"}},
		{"end before start", `"subnet":"10.0.0.0/24","rangeStart":"10.0.0.50","rangeEnd":"10.0.0.20"`, []string{"rangeEnd", "10.0.0.20", "10.0.0.50"}},
		{"bad gateway", `"subnet":"10.0.0.0/24","gateway":"nope"`, []string{"ipam.gateway", "nope"}},
		{"gateway family", `"subnet":"10.0.0.0/24","gateway":"2001:db8::1"`, []string{"ipam.gateway", "2001:db8::1"}},
		{"empty set", `"ranges":[[]]`, []string{"ipam.ranges[0]", "empty"}},
		{"mixed set", `"ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"2001:db8::/64"}]]`, []string{"ipam.ranges[0][1]", "mixes"}},
		{"overlap in set", `"ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"10.0.0.0/25"}]]`, []string{"ipam.ranges[0][1]", "overlaps"}},
		{"overlap across sets", `"subnet":"10.0.0.0/16","ranges":[[{"subnet":"10.0.5.0/24"}]]`, []string{"range set 0", "range set 1", "overlaps"}},
		{"bad route", `"subnet":"10.0.0.0/24","routes":[{"dst":"x"}]`, []string{"ipam.routes[0]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, call{cmd: "ADD", id: "c"}, testConf(dir, tc.ipam), 7, tc.parts...)
		})
	}
	// Two v4 sets are not expressible in 0.2.0.
	old := strings.Replace(testConf(dir, `"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"}]]`), `"1.1.0"`, `"0.2.0"`, 1)
	wantErr(t, call{cmd: "ADD", id: "c"}, old, 7, "0.2.0")
	wantErr(t, call{cmd: "ADD", id: "c"}, `{"cniVersion":"1.1.0","name":"testnet","type":"x"}`, 7, "ipam")
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("invalid configs created %d entries in dataDir", len(ents))
	}
}

func TestRequestedIPs(t *testing.T) {
	dir := t.TempDir()
	ipam := `"ranges":[[{"subnet":"10.5.0.0/24"}],[{"subnet":"2001:db8:5::/64"}]]`
	conf := testConf(dir, ipam)
	// CNI_ARGS IP=, a comma-separated list, one per range set.
	r := mustAdd(t, conf, "a", "IgnoreUnknown=1;K8S_POD_NAME=x;IP=10.5.0.50,2001:db8:5::50")
	if got := addrs(r); !reflect.DeepEqual(got, []string{"10.5.0.50/24", "2001:db8:5::50/64"}) {
		t.Errorf("CNI_ARGS: got %v", got)
	}
	// args.cni.ips (a prefix length is accepted and ignored).
	r = mustAdd(t, testConf(dir, ipam, `"args":{"cni":{"ips":["10.5.0.60/24"]}}`), "b")
	if got := addrs(r); got[0] != "10.5.0.60/24" || !strings.HasPrefix(got[1], "2001:db8:5::") {
		t.Errorf("args.cni.ips: got %v", got)
	}
	// runtimeConfig.ips (capability "ips").
	r = mustAdd(t, testConf(dir, ipam, `"runtimeConfig":{"ips":["2001:db8:5::70"]}`), "c")
	if got := addrs(r); got[1] != "2001:db8:5::70/64" {
		t.Errorf("runtimeConfig.ips: got %v", got)
	}
	wantErr(t, call{cmd: "ADD", id: "d", args: "IP=10.5.0.50"}, conf, 7, "10.5.0.50", "already allocated", `container "a"`)
	wantErr(t, call{cmd: "ADD", id: "d", args: "IP=10.6.0.1"}, conf, 7, "10.6.0.1", "not in any range set")
	wantErr(t, call{cmd: "ADD", id: "d", args: "IP=10.5.0.1"}, conf, 7, "10.5.0.1", "gateway")
	wantErr(t, call{cmd: "ADD", id: "d", args: "IP=10.5.0.80,10.5.0.81"}, conf, 7, "10.5.0.81")
	wantErr(t, call{cmd: "ADD", id: "d", args: "IP=bogus"}, conf, 4, "bogus")
	wantErr(t, call{cmd: "ADD", id: "d"}, testConf(dir, ipam, `"runtimeConfig":{"ips":["nope"]}`), 7, "runtimeConfig.ips", "nope")
	wantErr(t, call{cmd: "ADD", id: "d", args: "FOO=1"}, conf, 2, "FOO")
	// Failed requests released what they had taken.
	if readIPFile(t, dir, "10.5.0.80") != "" {
		t.Error("failed ADD kept 10.5.0.80")
	}
	mustAdd(t, conf, "d", "IP=10.5.0.80")
}

func TestDelIdempotentAndCheck(t *testing.T) {
	dir := t.TempDir()
	conf := testConf(dir, `"subnet":"10.7.0.0/24"`)
	mustVerb(t, "DEL", conf, "never") // no data directory yet
	if _, err := os.Stat(filepath.Join(dir, "testnet")); !os.IsNotExist(err) {
		t.Error("DEL created the data directory")
	}
	r := mustAdd(t, conf, "c1")
	mustAdd(t, conf, "c2")
	prev := `"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"` + r.IPs[0].Address.String() + `"}]}`
	mustVerb(t, "CHECK", testConf(dir, `"subnet":"10.7.0.0/24"`, prev), "c1")
	wantErr(t, call{cmd: "CHECK", id: "c2"}, testConf(dir, `"subnet":"10.7.0.0/24"`, prev), 999, "10.7.0.2", "not allocated")
	wantErr(t, call{cmd: "CHECK", id: "c1", ifname: "eth1"}, testConf(dir, `"subnet":"10.7.0.0/24"`, prev), 3, "no address")
	mustVerb(t, "DEL", conf, "c1")
	mustVerb(t, "DEL", conf, "c1")
	mustVerb(t, "DEL", conf, "unknown")
	wantErr(t, call{cmd: "CHECK", id: "c1"}, testConf(dir, `"subnet":"10.7.0.0/24"`, prev), 3, "c1")
	if readIPFile(t, dir, "10.7.0.2") != "" || readIPFile(t, dir, "10.7.0.3") == "" {
		t.Error("DEL released the wrong address")
	}
	// DEL is by attachment: another interface of the same container stays.
	out, code := run(t, call{cmd: "ADD", id: "c3", ifname: "net1"}, conf)
	if code != 0 {
		t.Fatal(out)
	}
	mustAdd(t, conf, "c3")
	if out, code := run(t, call{cmd: "DEL", id: "c3", ifname: "net1"}, conf); code != 0 {
		t.Fatal(out)
	}
	mustVerb(t, "CHECK", testConf(dir, `"subnet":"10.7.0.0/24"`, `"prevResult":{"cniVersion":"1.1.0"}`), "c3")
}

func TestGC(t *testing.T) {
	dir := t.TempDir()
	conf := testConf(dir, `"subnet":"10.8.0.0/24"`)
	mustAdd(t, conf, "keep")
	mustAdd(t, conf, "drop")
	if out, code := run(t, call{cmd: "ADD", id: "keep", ifname: "net1"}, conf); code != 0 {
		t.Fatal(out)
	}
	// An old-format file (container ID only) of a valid and of an invalid container.
	os.WriteFile(filepath.Join(dir, "testnet", "10.8.0.100"), []byte("keep"), 0o600)
	os.WriteFile(filepath.Join(dir, "testnet", "10.8.0.101"), []byte("gone\n"), 0o600)
	gcConf := testConf(dir, `"subnet":"10.8.0.0/24"`, `"cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]`)
	mustVerb(t, "GC", gcConf, "")
	for ip, want := range map[string]bool{"10.8.0.2": true, "10.8.0.3": false, "10.8.0.4": false, "10.8.0.100": true, "10.8.0.101": false} {
		if got := readIPFile(t, dir, ip) != ""; got != want {
			t.Errorf("after GC %s present=%v, want %v", ip, got, want)
		}
	}
	// The index follows: DEL of the kept attachment releases it.
	mustVerb(t, "DEL", conf, "keep")
	if readIPFile(t, dir, "10.8.0.2") != "" {
		t.Error("DEL after GC did not release 10.8.0.2")
	}
	mustVerb(t, "GC", testConf(dir, `"subnet":"10.8.0.0/24"`), "")
	if readIPFile(t, dir, "10.8.0.100") != "" {
		t.Error("GC with no valid attachments kept the old-format file")
	}
}

func TestIndexRebuild(t *testing.T) {
	dir := t.TempDir()
	conf := testConf(dir, `"subnet":"10.3.0.0/24"`)
	net := filepath.Join(dir, "testnet")
	mustAdd(t, conf, "a")
	mustAdd(t, conf, "b")
	mustAdd(t, conf, "c")

	// Missing index: rebuilt, DEL still finds "a".
	if err := os.RemoveAll(filepath.Join(net, indexDirName)); err != nil {
		t.Fatal(err)
	}
	mustVerb(t, "DEL", conf, "a")
	if readIPFile(t, dir, "10.3.0.2") != "" {
		t.Fatal("DEL with a missing index did not release 10.3.0.2")
	}
	// Corrupt entries: garbage, and a valid-looking entry pointing at another's address.
	s := &store{dir: net, idxDir: filepath.Join(net, indexDirName), attDir: filepath.Join(net, indexDirName, attDirName)}
	os.WriteFile(s.attPath(owner{"b", "eth0"}), []byte("{garbage"), 0o600)
	mustVerb(t, "DEL", conf, "b")
	if readIPFile(t, dir, "10.3.0.3") != "" {
		t.Fatal("DEL with a corrupt entry did not release 10.3.0.3")
	}
	os.WriteFile(s.attPath(owner{"x", "eth0"}), []byte(`{"containerID":"x","ifname":"eth0","ips":["10.3.0.4"]}`), 0o600)
	mustVerb(t, "DEL", conf, "x")
	if readIPFile(t, dir, "10.3.0.4") == "" {
		t.Fatal("a corrupt entry made DEL release another container's address")
	}
	// Corrupt state.
	os.WriteFile(filepath.Join(s.idxDir, stateName), []byte("nonsense"), 0o600)
	mustVerb(t, "DEL", conf, "c")
	if readIPFile(t, dir, "10.3.0.4") != "" {
		t.Fatal("DEL with corrupt state did not release 10.3.0.4")
	}

	// Files written behind our back (another host-local): no duplicate,
	// duplicate-attachment check, and DEL releases them, old format too.
	os.WriteFile(filepath.Join(net, "10.3.0.5"), []byte("ext\r\neth0"), 0o600)
	os.WriteFile(filepath.Join(net, "10.3.0.6"), []byte("old"), 0o600)
	wantErr(t, call{cmd: "ADD", id: "ext"}, conf, 7, "duplicate", "10.3.0.5")
	if got := addrs(mustAdd(t, conf, "d")); got[0] != "10.3.0.7/24" {
		t.Errorf("ADD after foreign files got %v, want 10.3.0.7/24", got)
	}
	mustVerb(t, "DEL", conf, "ext")
	mustVerb(t, "DEL", conf, "old")
	if readIPFile(t, dir, "10.3.0.5") != "" || readIPFile(t, dir, "10.3.0.6") != "" {
		t.Error("foreign files not released")
	}
	// Stamps match again after our own operations: no rebuild needed.
	if !s.indexValid() {
		t.Error("index not sealed after DEL")
	}
}

func TestRuntimeIPRanges(t *testing.T) {
	dir := t.TempDir()
	// runtimeConfig.ipRanges (capability ipRanges) come first, as set 0.
	conf := testConf(dir, `"subnet":"10.60.0.0/24"`, `"runtimeConfig":{"ipRanges":[[{"subnet":"10.61.0.0/24","rangeStart":"10.61.0.10"}]]}`)
	r := mustAdd(t, conf, "a")
	if got := addrs(r); !reflect.DeepEqual(got, []string{"10.61.0.10/24", "10.60.0.2/24"}) {
		t.Errorf("got %v", got)
	}
	mustVerb(t, "DEL", conf, "a")
	if got := allocated(t, dir); len(got) != 0 {
		t.Errorf("left %v", got)
	}
}
