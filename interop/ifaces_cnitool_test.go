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
	"github.com/patchbay-cni/patchbay/spec"
)

// cnitoolCycle writes conf into a conf dir and has the reference cnitool
// run add, check (where the version has it) and del, then del again, on
// our plugins. It returns the add result.
func cnitoolCycle(t *testing.T, hostNS, ctrPath, net, conf string, between func(r *spec.Result)) *spec.Result {
	t.Helper()
	confDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "10-net.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := cnitool(t, hostNS, confDir, "add", net, ctrPath)
	if err != nil {
		t.Fatalf("cnitool add: %v\n%s", err, out)
	}
	r, err := spec.ParseResult([]byte(out), "")
	if err != nil {
		t.Fatalf("cnitool add printed no result: %v\n%s", err, out)
	}
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	json.Unmarshal([]byte(conf), &v)
	if r.CNIVersion != v.CNIVersion {
		t.Errorf("result version %s, want %s", r.CNIVersion, v.CNIVersion)
	}
	if between != nil {
		between(r)
	}
	if spec.VerbSupported(v.CNIVersion, spec.CmdCheck) {
		if out, err := cnitool(t, hostNS, confDir, "check", net, ctrPath); err != nil {
			t.Errorf("cnitool check: %v\n%s", err, out)
		}
	}
	for i := range 2 {
		if out, err := cnitool(t, hostNS, confDir, "del", net, ctrPath); err != nil {
			t.Fatalf("cnitool del #%d: %v\n%s", i+1, err, out)
		}
	}
	return r
}

func hostLocal(dir, subnet string) string {
	return fmt.Sprintf(`"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]],"routes":[{"dst":"192.168.0.0/16"}]}`, dir, subnet)
}

// The reference cnitool drives our tap (0.4.0 and 1.1.0) and host-device
// (a veth of the test host as the device) through add, check and del.
func TestCnitoolTapAndHostDevice(t *testing.T) {
	hostNS, _ := testutil.NewNS(t, "cnthost")
	for _, v := range []string{"0.4.0", "1.1.0"} {
		t.Run("tap-"+v, func(t *testing.T) {
			ctrNS, ctrPath := testutil.NewNS(t, "cntctr")
			conf := fmt.Sprintf(`{"cniVersion":%q,"name":"taps","plugins":[{"type":"tap","multiQueue":true,"mtu":1400,%s}]}`,
				v, hostLocal(t.TempDir(), "10.90.0.0/24"))
			cnitoolCycle(t, hostNS, ctrPath, "taps", conf, func(r *spec.Result) {
				if got, _ := testutil.InNS(t, ctrNS, "ip", "-d", "link", "show", "eth0"); !strings.Contains(got, "tun type tap") || !strings.Contains(got, "multi_queue") {
					t.Errorf("eth0 is not a multi-queue tap: %s", got)
				}
			})
			if got, _ := testutil.InNS(t, ctrNS, "ip", "-o", "link"); strings.Contains(got, "eth0") {
				t.Errorf("tap left after del: %s", got)
			}
		})
		t.Run("host-device-"+v, func(t *testing.T) {
			ctrNS, ctrPath := testutil.NewNS(t, "cntctr")
			if out, err := testutil.InNS(t, hostNS, "ip", "link", "add", "dev0", "type", "veth", "peer", "name", "peer0"); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			defer testutil.InNS(t, hostNS, "ip", "link", "del", "dev0")
			conf := fmt.Sprintf(`{"cniVersion":%q,"name":"hdev","plugins":[{"type":"host-device","device":"dev0","dataDir":%q,%s}]}`,
				v, t.TempDir(), hostLocal(t.TempDir(), "10.91.0.0/24"))
			cnitoolCycle(t, hostNS, ctrPath, "hdev", conf, func(r *spec.Result) {
				if got, _ := testutil.InNS(t, ctrNS, "ip", "-o", "addr", "show", "eth0"); !strings.Contains(got, "10.91.0.2/24") {
					t.Errorf("the moved device has no address: %s", got)
				}
			})
			if got, _ := testutil.InNS(t, hostNS, "ip", "-o", "link", "show", "dev0"); !strings.Contains(got, "dev0@peer0") {
				t.Errorf("dev0 not back in the host after del: %q", got)
			}
		})
	}
}

// In the VM: the reference cnitool drives our ptp + vrf (two networks,
// one VRF; CHECK of the chain at 1.1.0) and bridge with an access vlan
// and a gateway.
func TestCnitoolVrfAndBridgeVlan(t *testing.T) {
	vmtest.Run(t, func(t *testing.T) {
		hostNS, _ := testutil.NewNS(t, "cnvhost")
		ctrNS, ctrPath := testutil.NewNS(t, "cnvctr")
		for i, net := range []string{"red1", "red2"} {
			conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"ptp",%s},{"type":"vrf","vrfname":"red"}]}`,
				net, hostLocal(t.TempDir(), fmt.Sprintf("10.92.%d.0/24", i)))
			confDir := t.TempDir()
			os.WriteFile(filepath.Join(confDir, "10.conflist"), []byte(conf), 0o644)
			env := []string{fmt.Sprintf("CNI_IFNAME=eth%d", i)}
			if out, err := cnitoolEnv(t, hostNS, confDir, env, "add", net, ctrPath); err != nil {
				t.Fatalf("cnitool add %s: %v\n%s", net, err, out)
			}
			if out, err := cnitoolEnv(t, hostNS, confDir, env, "check", net, ctrPath); err != nil {
				t.Errorf("cnitool check %s: %v\n%s", net, err, out)
			}
			// ptp's routes (the gateway on-link, the rest via it) followed the
			// interface into the VRF: traffic to the host end goes.
			if out, err := testutil.InNS(t, ctrNS, "ping", "-c", "1", "-W", "5", "-I", "red", fmt.Sprintf("10.92.%d.1", i)); err != nil {
				t.Errorf("ping the ptp gateway in vrf red: %v: %s", err, out)
			}
			t.Cleanup(func() {
				if out, err := cnitoolEnv(t, hostNS, confDir, env, "del", net, ctrPath); err != nil {
					t.Errorf("cnitool del %s: %v\n%s", net, err, out)
				}
			})
		}
		if got, _ := testutil.InNS(t, ctrNS, "ip", "-o", "link", "show", "master", "red"); !strings.Contains(got, "eth0") || !strings.Contains(got, "eth1") {
			t.Errorf("vrf red members: %s", got)
		}

		vctrNS, vctrPath := testutil.NewNS(t, "cnvctr")
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"vlan","plugins":[{"type":"bridge","bridge":"brcn","vlan":42,"isGateway":true,%s}]}`,
			hostLocal(t.TempDir(), "10.93.0.0/24"))
		cnitoolCycle(t, hostNS, vctrPath, "vlan", conf, func(r *spec.Result) {
			if out, err := testutil.InNS(t, vctrNS, "ping", "-c", "1", "-W", "5", "10.93.0.1"); err != nil {
				t.Errorf("ping the vlan 42 gateway: %v: %s", err, out)
			}
		})
	})
}
