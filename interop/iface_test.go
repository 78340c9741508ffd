package interop

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

// ifaceCase is one interface plugin driven by the reference cnitool.
type ifaceCase struct {
	typ  string
	keys string // the plugin's keys, JSON object members
	// master: make the veth pair m0/m0p (up) in the host namespace.
	master bool
}

// driveIface runs cnitool add, check, del and del again against our
// plugin with our host-local, at each version, dual stack, and checks
// the interface in the container, the printed result and that DEL
// leaves nothing (interface, allocation).
func driveIface(t *testing.T, c ifaceCase) {
	hostNS, _ := testutil.NewNS(t, "ifcth")
	if c.master {
		for _, args := range [][]string{{"link", "add", "m0", "type", "veth", "peer", "name", "m0p"}, {"link", "set", "m0", "up"}, {"link", "set", "m0p", "up"}} {
			if out, err := testutil.InNS(t, hostNS, append([]string{"ip"}, args...)...); err != nil {
				t.Fatalf("ip %v: %v: %s", args, err, out)
			}
		}
	}
	for _, v := range []string{"0.4.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			ctrNS, ctrPath := testutil.NewNS(t, "ifctc")
			confDir := t.TempDir()
			ipamDir := t.TempDir()
			net := c.typ + "-" + strings.ReplaceAll(v, ".", "")
			conf := fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[{"type":%q,%s
			  "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.180.0.0/24"}],[{"subnet":"fd00:180::/64"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}`,
				v, net, c.typ, c.keys, ipamDir)
			if err := os.WriteFile(filepath.Join(confDir, "10-"+c.typ+".conflist"), []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := cnitool(t, hostNS, confDir, "add", net, ctrPath)
			if err != nil {
				t.Fatalf("cnitool add: %v\n%s", err, out)
			}
			var res struct {
				CNIVersion string `json:"cniVersion"`
				Interfaces []struct{ Name, Mac, Sandbox string }
				IPs        []struct{ Address string }
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("cnitool add printed no JSON result: %v\n%s", err, out)
			}
			if res.CNIVersion != v || len(res.Interfaces) != 1 || res.Interfaces[0].Sandbox != ctrPath || len(res.IPs) != 2 {
				t.Errorf("result: %s", out)
			}
			link, err := testutil.InNS(t, ctrNS, "ip", "-d", "-o", "link", "show", "eth0")
			if err != nil || !strings.Contains(link, " "+c.typ+" ") || !strings.Contains(link, res.Interfaces[0].Mac) {
				t.Errorf("eth0 in the container: %v: %s", err, link)
			}
			addrs, _ := testutil.InNS(t, ctrNS, "ip", "-o", "addr", "show", "eth0")
			for _, a := range res.IPs {
				if !strings.Contains(addrs, a.Address) {
					t.Errorf("address %s not on eth0: %s", a.Address, addrs)
				}
			}
			if out, err := cnitool(t, hostNS, confDir, "check", net, ctrPath); err != nil {
				t.Fatalf("cnitool check: %v\n%s", err, out)
			}
			for i := range 2 { // DEL is idempotent
				if out, err := cnitool(t, hostNS, confDir, "del", net, ctrPath); err != nil {
					t.Fatalf("cnitool del %d: %v\n%s", i+1, err, out)
				}
			}
			if l, _ := testutil.InNS(t, ctrNS, "ip", "-o", "link", "show", "eth0"); l != "" && !strings.Contains(l, "does not exist") {
				t.Errorf("eth0 left after cnitool del: %s", l)
			}
			left, _ := filepath.Glob(filepath.Join(ipamDir, net, "*[0-9a-f]"))
			for _, f := range left {
				if b := filepath.Base(f); b != "lock" && !strings.HasPrefix(b, "last_reserved") {
					t.Errorf("allocation left after cnitool del: %s", b)
				}
			}
		})
	}
}

// TestCnitoolDrivesMacvlan: on this machine's kernel.
func TestCnitoolDrivesMacvlan(t *testing.T) {
	driveIface(t, ifaceCase{typ: "macvlan", keys: `"master":"m0","mode":"bridge",`, master: true})
}

// TestCnitoolDrivesIpvlanVlanDummyVM: on Debian's kernel in the test VM
// (this machine's has no ipvlan, 8021q or dummy).
func TestCnitoolDrivesIpvlanVlanDummyVM(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		for _, c := range []ifaceCase{
			{typ: "ipvlan", keys: `"master":"m0","mode":"l2",`, master: true},
			{typ: "vlan", keys: `"master":"m0","vlanId":33,`, master: true},
			{typ: "dummy"},
			{typ: "macvlan", keys: `"master":"m0",`, master: true},
		} {
			t.Run(c.typ, func(t *testing.T) { driveIface(t, c) })
		}
	})
}
