package tap

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

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
			var adds, dels []time.Duration
			for i := 0; b.Loop(); i++ {
				env := map[string]string{"CNI_CONTAINERID": fmt.Sprint("b", i), "CNI_NETNS": contPath, "CNI_IFNAME": "tap0", "CNI_PATH": c.dir}
				bin := filepath.Join(c.dir, "tap")
				t0 := time.Now()
				env["CNI_COMMAND"] = "ADD"
				if out, err := testutil.ExecPlugin(b, hostPath, bin, env, conf); err != nil {
					b.Fatalf("ADD: %v: %s", err, out)
				}
				t1 := time.Now()
				env["CNI_COMMAND"] = "DEL"
				if out, err := testutil.ExecPlugin(b, hostPath, bin, env, conf); err != nil {
					b.Fatalf("DEL: %v: %s", err, out)
				}
				adds, dels = append(adds, t1.Sub(t0)), append(dels, time.Since(t1))
			}
			b.ReportMetric(testutil.Median(adds), "add-ms")
			b.ReportMetric(testutil.Median(dels), "del-ms")
		})
	}
}
