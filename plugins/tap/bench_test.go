package tap

import (
	"path/filepath"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// BenchmarkAddDel times ADD and DEL of a layer-2 tap (no IPAM: the plugin's
// own work) as a runtime runs them (one exec each), ours (bin/, `make
// build`) against the reference tap v1.9.1, which executes `ip` twice per
// ADD. Medians are reported as add-ms and del-ms: go test -bench AddDel
// -benchtime 20x ./plugins/tap/.
func BenchmarkAddDel(b *testing.B) {
	for _, c := range []struct{ name, dir string }{{"ref", testutil.RefBin(b)}, {"ours", testutil.OurBin(b)}} {
		b.Run(c.name, func(b *testing.B) {
			_, hostPath := testutil.NewNS(b, "tpb")
			_, contPath := testutil.NewNS(b, "tpbc")
			conf := `{"cniVersion":"1.1.0","name":"tapbench","type":"tap","mtu":1400,"multiQueue":true}`
			env := map[string]string{"CNI_NETNS": contPath, "CNI_IFNAME": "tap0", "CNI_PATH": c.dir}
			testutil.BenchAddDel(b, hostPath, filepath.Join(c.dir, "tap"), env, conf)
		})
	}
}
