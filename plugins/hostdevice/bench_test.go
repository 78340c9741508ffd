package hostdevice

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// BenchmarkAddDel times ADD and DEL of host-device (a veth of the test host
// as the device, no IPAM: the move in and back) as a runtime runs them,
// ours (bin/, `make build`) against the reference v1.9.1, which makes a
// temporary namespace for each move. Medians as add-ms and del-ms: go test
// -bench AddDel -benchtime 20x ./plugins/hostdevice/.
func BenchmarkAddDel(b *testing.B) {
	for _, c := range []struct{ name, dir string }{{"ref", testutil.RefBin(b)}, {"ours", testutil.OurBin(b)}} {
		b.Run(c.name, func(b *testing.B) {
			host, hostPath := testutil.NewNS(b, "hdb")
			_, contPath := testutil.NewNS(b, "hdbc")
			if out, err := testutil.InNS(b, host, "ip", "link", "add", "dev0", "type", "veth", "peer", "name", "peer0"); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			conf := `{"cniVersion":"1.1.0","name":"hdbench","type":"host-device","device":"dev0","dataDir":"` + b.TempDir() + `"}`
			var adds, dels []time.Duration
			for i := 0; b.Loop(); i++ {
				env := map[string]string{"CNI_CONTAINERID": fmt.Sprint("b", i), "CNI_NETNS": contPath, "CNI_IFNAME": "net1", "CNI_PATH": c.dir}
				bin := filepath.Join(c.dir, "host-device")
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
