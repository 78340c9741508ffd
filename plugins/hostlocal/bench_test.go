package hostlocal

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

const benchIPAM = `"subnet":"10.128.0.0/16"`

// prefill allocates n addresses through ADD, as a busy node would have.
func prefill(b *testing.B, conf string, n int) {
	b.Helper()
	for i := range n {
		if out, code := run(b, call{cmd: "ADD", id: fmt.Sprintf("pre%d", i)}, conf); code != 0 {
			b.Fatal(out)
		}
	}
}

// BenchmarkAddDel is one in-process ADD plus DEL with 0 and 10k addresses
// already allocated: the cost must not grow with the pool.
func BenchmarkAddDel(b *testing.B) {
	for _, n := range []int{0, 10000} {
		b.Run(fmt.Sprintf("allocated=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			conf := testConf(dir, benchIPAM)
			prefill(b, conf, n)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("bench%d", i)
				if out, code := run(b, call{cmd: "ADD", id: id}, conf); code != 0 {
					b.Fatal(out)
				}
				if out, code := run(b, call{cmd: "DEL", id: id}, conf); code != 0 {
					b.Fatal(out)
				}
			}
		})
	}
}

// BenchmarkExecAdd measures ADD as a separate process (then DEL, untimed),
// for us (this test binary acting as the plugin) and for the reference
// v1.9.1 binary, with 0 and 10k addresses already allocated. The 10k
// allocations are written in the shared on-disk format, as the reference
// leaves them; our first call then builds the index (first-del-ms).
func BenchmarkExecAdd(b *testing.B) {
	bins := map[string]string{"ours": os.Args[0], "reference": testutil.RefBin(b) + "/host-local"}
	for _, impl := range []string{"ours", "reference"} {
		for _, n := range []int{0, 10000} {
			b.Run(fmt.Sprintf("%s/allocated=%d", impl, n), func(b *testing.B) {
				dir := b.TempDir()
				conf := testConf(dir, benchIPAM)
				writeAllocations(b, filepath.Join(dir, "testnet"), n)
				// One untimed call first: ours builds its index there, once.
				start := time.Now()
				if out, err := execPlugin(b, bins[impl], call{cmd: "DEL", id: "warmup"}, conf); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
				firstDel := time.Since(start)
				b.ResetTimer()
				var add time.Duration
				for i := 0; b.Loop(); i++ {
					id := fmt.Sprintf("bench%d", i)
					start := time.Now()
					if out, err := execPlugin(b, bins[impl], call{cmd: "ADD", id: id}, conf); err != nil {
						b.Fatalf("%v: %s", err, out)
					}
					add += time.Since(start)
					b.StopTimer()
					if out, err := execPlugin(b, bins[impl], call{cmd: "DEL", id: id}, conf); err != nil {
						b.Fatalf("%v: %s", err, out)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(add.Microseconds())/float64(b.N)/1000, "add-ms")
				b.ReportMetric(float64(firstDel.Microseconds())/1000, "first-del-ms")
			})
		}
	}
}

// writeAllocations creates n per-IP files as the reference writes them,
// starting at .2 (the reference's and our first address).
func writeAllocations(b *testing.B, dir string, n int) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	a := netip.MustParseAddr("10.128.0.2")
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, a.String()), fmt.Appendf(nil, "pre%d\r\neth0", i), 0o600); err != nil {
			b.Fatal(err)
		}
		a = a.Next()
	}
	if n > 0 {
		os.WriteFile(filepath.Join(dir, "last_reserved_ip.0"), []byte(a.Prev().String()), 0o600)
	}
}
