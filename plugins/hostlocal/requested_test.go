package hostlocal

import (
	"reflect"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// Issue 12: Multus sends an "ips" request both as CNI_ARGS IP= and as
// runtimeConfig.ips. The same address from several sources is one request
// (as the reference treats it); different addresses for one range set are
// refused naming both addresses and both sources.
func TestRequestedIPFromSeveralSources(t *testing.T) {
	dir := t.TempDir()
	ipam := `"ranges":[[{"subnet":"10.5.0.0/24"}],[{"subnet":"2001:db8:5::/64"}]]`
	multus := testConf(dir, ipam, `"runtimeConfig":{"ips":["10.5.0.50/24"]}`, `"args":{"cni":{"ips":["10.5.0.50"]}}`)
	r := mustAdd(t, multus, "a", "IgnoreUnknown=1;IP=10.5.0.50/24")
	if got := addrs(r); len(got) != 2 || got[0] != "10.5.0.50/24" {
		t.Errorf("one address asked three ways: got %v", got)
	}
	if readIPFile(t, dir, "10.5.0.50") != "a\r\neth0" {
		t.Errorf("10.5.0.50 file: %q", readIPFile(t, dir, "10.5.0.50"))
	}

	// The reference accepts the same request.
	refDir := t.TempDir()
	out, err := execPlugin(t, testutil.RefBin(t)+"/host-local", call{cmd: "ADD", id: "a", args: "IgnoreUnknown=1;IP=10.5.0.50"},
		testConf(refDir, ipam, `"runtimeConfig":{"ips":["10.5.0.50/24"]}`))
	if err != nil {
		t.Fatalf("reference ADD: %v: %s", err, out)
	}
	ref, _ := spec.ParseResult([]byte(out), "")
	if got := addrs(ref); !reflect.DeepEqual(got[:1], []string{"10.5.0.50/24"}) {
		t.Errorf("reference: %v", got)
	}

	conflict := testConf(dir, ipam, `"runtimeConfig":{"ips":["10.5.0.61/24"]}`)
	e := wantErr(t, call{cmd: "ADD", id: "b", args: "IP=10.5.0.60"}, conflict, 7, "10.5.0.60", "CNI_ARGS IP", "10.5.0.61", "runtimeConfig.ips", "range set 0")
	if strings.HasPrefix(e.Msg, "host-local") {
		t.Errorf("message repeats the plugin's name: %q", e.Msg)
	}
	// Both families at once from different sources is fine.
	r = mustAdd(t, testConf(dir, ipam, `"runtimeConfig":{"ips":["2001:db8:5::60"]}`), "c", "IP=10.5.0.60")
	if got := addrs(r); !reflect.DeepEqual(got, []string{"10.5.0.60/24", "2001:db8:5::60/64"}) {
		t.Errorf("two families: %v", got)
	}
	if got := allocated(t, dir); len(got) != 4 {
		t.Errorf("allocations %v, want 4 (nothing kept by the refused request)", got)
	}
}

// Numbers the kernel takes as u32 are range-checked, not truncated, and a
// dataDir that no file system accepts is a config error.
func TestRouteAndPathValues(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ route, key string }{
		{`{"dst":"10.9.0.0/16","table":4294967396}`, "ipam.routes[0].table 4294967396"},
		{`{"dst":"10.9.0.0/16","priority":-1}`, "ipam.routes[0].priority -1"},
		{`{"dst":"10.9.0.0/16","mtu":4294967296}`, "ipam.routes[0].mtu 4294967296"},
		{`{"dst":"10.9.0.0/16","scope":256}`, "ipam.routes[0].scope 256"},
	} {
		wantErr(t, call{cmd: "ADD", id: "a"}, testConf(dir, `"subnet":"10.5.0.0/24","routes":[`+tc.route+`]`), 7, tc.key, "out of range")
	}
	r := mustAdd(t, testConf(dir, `"subnet":"10.5.0.0/24","routes":[{"dst":"10.9.0.0/16","table":4294967295,"scope":255}]`), "ok")
	if *r.Routes[0].Table != 4294967295 {
		t.Errorf("table %d", *r.Routes[0].Table)
	}
	bad := `{"cniVersion":"1.1.0","name":"testnet","type":"bridge","ipam":{"type":"host-local","dataDir":"/tmp/a\u0000b","subnet":"10.5.0.0/24"}}`
	wantErr(t, call{cmd: "ADD", id: "a"}, bad, 7, "ipam.dataDir")
	mustVerb(t, "DEL", bad, "a") // nothing can have been allocated there
}
