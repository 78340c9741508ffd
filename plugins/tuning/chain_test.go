package tuning

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// TestChainWithCnitool runs ptp + static IPAM + tuning from our bin/
// through the reference cnitool (a real runtime), in a host namespace of
// its own: the mac capability reaches tuning, the result shows it, CHECK
// passes and DEL restores the namespace-wide sysctl.
func TestChainWithCnitool(t *testing.T) {
	ours := testutil.OurBin(t)
	hostNS, _ := testutil.NewNS(t, "tunh")
	f := newFixture(t)
	f.ip(t, "link", "del", "eth0") // ptp creates eth0 itself
	dir := t.TempDir()
	conf := `{"cniVersion":"1.1.0","name":"tnet","plugins":[
		{"type":"ptp","ipam":{"type":"static","addresses":[{"address":"10.77.0.5/24","gateway":"10.77.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}},
		{"type":"tuning","capabilities":{"mac":true},"dataDir":"` + f.dataDir + `","mtu":1400,"sysctl":{"net.core.somaxconn":"555"}}]}`
	if err := os.WriteFile(filepath.Join(dir, "10-tnet.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	somaxconn := f.sysctl(t, "net/core/somaxconn")
	varlib := t.TempDir() // cnitool's libcni cache (fixed at /var/lib/cni) lands in varlib/cni
	cnitool := func(verb string) string {
		t.Helper()
		out, err := testutil.Cnitool(t, hostNS, varlib, []string{"NETCONFPATH=" + dir, "CNI_PATH=" + ours, `CAP_ARGS={"mac":"c2:11:22:33:44:88"}`},
			verb, "tnet", f.path)
		if err != nil {
			t.Fatalf("cnitool %s: %v: %s", verb, err, out)
		}
		return string(out)
	}
	var res struct {
		Interfaces []struct{ Name, Mac, Sandbox string }
		IPs        []struct{ Address string }
	}
	out := cnitool("add")
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("add output: %v: %s", err, out)
	}
	found := false
	for _, in := range res.Interfaces {
		if in.Name == "eth0" && in.Sandbox != "" {
			found = in.Mac == "c2:11:22:33:44:88"
		}
	}
	if !found || len(res.IPs) != 1 || res.IPs[0].Address != "10.77.0.5/24" {
		t.Errorf("unexpected result: %s", out)
	}
	if l := f.link(t, "eth0"); l.Address != "c2:11:22:33:44:88" || l.MTU != 1400 {
		t.Errorf("eth0: %+v", l)
	}
	if got := f.sysctl(t, "net/core/somaxconn"); got != "555" {
		t.Errorf("somaxconn %s", got)
	}
	cnitool("check")
	cnitool("del")
	if got := f.sysctl(t, "net/core/somaxconn"); got != somaxconn {
		t.Errorf("somaxconn %s after DEL, want %s", got, somaxconn)
	}
	if out, _ := exec.Command("ip", "-n", f.ns, "-o", "link").Output(); strings.Contains(string(out), "eth0") {
		t.Errorf("eth0 left after DEL: %s", out)
	}
}
