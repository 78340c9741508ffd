package interop

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// cnitool runs the reference cnitool inside the test host namespace with our
// bin/ as CNI_PATH and libcni's cache in a temp dir (testutil.Cnitool).
func cnitool(t *testing.T, hostNS, confDir string, args ...string) (string, error) {
	t.Helper()
	return cnitoolEnv(t, hostNS, confDir, nil, args...)
}

func cnitoolEnv(t *testing.T, hostNS, confDir string, env []string, args ...string) (string, error) {
	t.Helper()
	env = append([]string{"NETCONFPATH=" + confDir, "CNI_PATH=" + testutil.OurBin(t)}, env...)
	return testutil.Cnitool(t, hostNS, varlibFor(t, confDir), env, args...)
}

// varlibFor gives each conf dir its own /var/lib stand-in, next to it.
func varlibFor(t *testing.T, confDir string) string {
	d := confDir + "-varlib"
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func loIsUp(t *testing.T, ns string) bool {
	out, err := testutil.InNS(t, ns, "ip", "-o", "link", "show", "lo")
	if err != nil {
		t.Fatalf("ip link show lo: %v: %s", err, out)
	}
	return strings.Contains(out, ",UP")
}

// TestCnitoolDrivesLoopbackAtEveryVersion: the reference cnitool runs ADD,
// CHECK (where the version has it) and DEL against our loopback for every
// spec version, and the result it prints is in that version's format.
func TestCnitoolDrivesLoopbackAtEveryVersion(t *testing.T) {
	hostNS, _ := testutil.NewNS(t, "cnitoolhost")
	for _, v := range spec.AllVersions {
		t.Run(v, func(t *testing.T) {
			ctrNS, ctrPath := testutil.NewNSLoDown(t, "cnitoolctr")
			confDir := t.TempDir()
			net := "lonet-" + strings.ReplaceAll(v, ".", "")
			conf := fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[{"type":"loopback"}]}`, v, net)
			if err := os.WriteFile(filepath.Join(confDir, "10-lo.conflist"), []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := cnitool(t, hostNS, confDir, "add", net, ctrPath)
			if err != nil {
				t.Fatalf("cnitool add: %v\n%s", err, out)
			}
			if !loIsUp(t, ctrNS) {
				t.Fatal("lo is not up after cnitool add")
			}
			var res map[string]any
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("cnitool add printed no JSON result: %v\n%s", err, out)
			}
			if res["cniVersion"] != v {
				t.Errorf("result cniVersion = %v, want %s", res["cniVersion"], v)
			}
			if spec.Compare(v, spec.V030) < 0 {
				if res["ip4"] == nil || res["interfaces"] != nil {
					t.Errorf("%s result should have ip4 and no interfaces: %s", v, out)
				}
			} else {
				ifs, _ := res["interfaces"].([]any)
				if len(ifs) != 1 || res["ips"] == nil {
					t.Errorf("%s result should have the lo interface and its ips: %s", v, out)
				}
				ips, _ := res["ips"].([]any)
				for _, ip := range ips {
					_, hasVersion := ip.(map[string]any)["version"]
					if want := spec.Compare(v, spec.V100) < 0; hasVersion != want {
						t.Errorf("%s: ips entry version key present=%v, want %v: %s", v, hasVersion, want, out)
					}
				}
			}
			if spec.VerbSupported(v, spec.CmdCheck) {
				if out, err := cnitool(t, hostNS, confDir, "check", net, ctrPath); err != nil {
					t.Fatalf("cnitool check: %v\n%s", err, out)
				}
			}
			if spec.VerbSupported(v, spec.CmdStatus) {
				if out, err := cnitool(t, hostNS, confDir, "status", net, ctrPath); err != nil {
					t.Fatalf("cnitool status: %v\n%s", err, out)
				}
			}
			if out, err := cnitool(t, hostNS, confDir, "del", net, ctrPath); err != nil {
				t.Fatalf("cnitool del: %v\n%s", err, out)
			}
			if loIsUp(t, ctrNS) {
				t.Fatal("lo still up after cnitool del")
			}
			if out, err := cnitool(t, hostNS, confDir, "del", net, ctrPath); err != nil {
				t.Fatalf("second cnitool del (must be idempotent): %v\n%s", err, out)
			}
		})
	}
}

// TestCnitoolGCReleasesLoopback: cnitool gc (no valid attachments) makes
// libcni DEL the cached attachment and then send GC to our plugin.
func TestCnitoolGCReleasesLoopback(t *testing.T) {
	hostNS, _ := testutil.NewNS(t, "cnitoolgchost")
	ctrNS, ctrPath := testutil.NewNSLoDown(t, "cnitoolgcctr")
	confDir := t.TempDir()
	conf := `{"cniVersion":"1.1.0","name":"lonet-gc","plugins":[{"type":"loopback"}]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-lo.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cnitool(t, hostNS, confDir, "add", "lonet-gc", ctrPath); err != nil {
		t.Fatalf("cnitool add: %v\n%s", err, out)
	}
	if out, err := cnitool(t, hostNS, confDir, "gc", "lonet-gc", ctrPath); err != nil {
		t.Fatalf("cnitool gc: %v\n%s", err, out)
	}
	if loIsUp(t, ctrNS) {
		t.Fatal("lo still up after cnitool gc released the stale attachment")
	}
}
