package hostdevice

import (
	"path/filepath"
	"testing"

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
			env := map[string]string{"CNI_NETNS": contPath, "CNI_IFNAME": "net1", "CNI_PATH": c.dir}
			testutil.BenchAddDel(b, hostPath, filepath.Join(c.dir, "host-device"), env, conf)
		})
	}
}
