package sbr

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// CHECK of a whole chain with sbr passes: bridge's (and ptp's) CHECK
// finds the routes sbr moved in the table sbr names for them in a 1.1.0
// result, and for older results (which cannot name tables) in the table
// the container address's rule selects. With the reference plugins the
// same chain's CHECK fails (bridge looks for the routes in the main
// table only): that is asserted too, so this test says when it changes.
func TestChainCheck(t *testing.T) {
	chains := map[string]string{
		"bridge": `{"type":"bridge","bridge":"brsbr","isDefaultGateway":true,
			"ipam":{"type":"host-local","dataDir":"%[2]s","ranges":[[{"subnet":"10.31.0.0/24"}],[{"subnet":"fd00:31::/64"}]],"routes":[{"dst":"192.168.50.0/24"}]}}`,
		"ptp": `{"type":"ptp","ipam":{"type":"host-local","dataDir":"%[2]s","ranges":[[{"subnet":"10.32.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}}`,
	}
	for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		for name, first := range chains {
			for _, impl := range []string{"ours", "ref"} {
				t.Run(v+"-"+name+"-"+impl, func(t *testing.T) {
					t.Parallel()
					bin := testutil.OurBin(t)
					if impl == "ref" {
						bin = testutil.RefBin(t)
					}
					_, hostPath := testutil.NewNS(t, "sbh")
					cont, contPath := testutil.NewNS(t, "sbc")
					dir := t.TempDir()
					list, err := spec.ParseConfList([]byte(fmt.Sprintf(`{"cniVersion":%q,"name":"sbrchain","plugins":[`+first+`,{"type":"sbr"}]}`, v, filepath.Join(dir, "ipam"))))
					if err != nil {
						t.Fatal(err)
					}
					cni := &runtime.CNI{Path: []string{bin}, CacheDir: filepath.Join(dir, "cache")}
					rt := &runtime.RuntimeConf{ContainerID: "sbrc1", NetNS: contPath, IfName: "eth0"}
					in := func(f func() error) error {
						var ferr error
						if err := netns.Do(hostPath, func() error { ferr = f(); return nil }); err != nil {
							t.Fatal(err)
						}
						return ferr
					}
					ctx := context.Background()
					if err := in(func() error { _, err := cni.AddNetworkList(ctx, list, rt); return err }); err != nil {
						t.Fatalf("ADD: %v", err)
					}
					rules, _ := testutil.InNS(t, cont, "ip", "rule")
					if !strings.Contains(rules, "lookup 100") {
						t.Errorf("no sbr rule after ADD:\n%s", rules)
					}
					err = in(func() error { return cni.CheckNetworkList(ctx, list, rt) })
					switch {
					case impl == "ours" && err != nil:
						t.Errorf("CHECK of %s + sbr: %v", name, err)
					case impl == "ref" && err == nil:
						t.Errorf("CHECK of the reference's %s + sbr passed: the reference changed, update this test and the README", name)
					case impl == "ref":
						t.Logf("reference CHECK: %v", err)
					}
					if err := in(func() error { return cni.DelNetworkList(ctx, list, rt) }); err != nil {
						t.Fatalf("DEL: %v", err)
					}
					if rules, _ := testutil.InNS(t, cont, "ip", "rule"); impl == "ours" && strings.Contains(rules, "lookup 10") {
						t.Errorf("rules left after DEL:\n%s", rules)
					}
				})
			}
		}
	}
}
