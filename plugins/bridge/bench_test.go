package bridge

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// BenchmarkAddDel times ADD and DEL of bridge + host-local as a runtime
// would (one process exec per plugin call), ours against the reference
// bridge v1.9.1, each with a fresh container netns per iteration, in a
// test host netns. Medians are reported as add-ms and del-ms. Run with
// e.g. -bench AddDel -benchtime 20x.
func BenchmarkAddDel(b *testing.B) {
	ours := buildOurs(b)
	ref := testutil.RefBin(b)
	cases := []struct{ name, bin, cniPath string }{
		{"ref-bridge+ref-host-local", filepath.Join(ref, "bridge"), ref},
		{"our-bridge+ref-host-local", filepath.Join(ours, "bridge"), ref},
	}
	if hasType(b, ours, "host-local") {
		cases = append(cases, struct{ name, bin, cniPath string }{"our-bridge+our-host-local", filepath.Join(ours, "bridge"), ours})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			_, hostPath := testutil.NewNS(b, "brb")
			dataDir := b.TempDir()
			conf := `{"cniVersion":"1.1.0","name":"benchnet","type":"bridge","bridge":"pbbr0","isGateway":true,` +
				`"ipam":{"type":"host-local","dataDir":"` + dataDir + `","ranges":[[{"subnet":"10.50.0.0/16"}]]}}`
			var adds, dels []time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				_, contPath := testutil.NewNS(b, "brbc")
				b.StartTimer()
				id := "bench" + string(rune('a'+i%26)) + time.Now().Format("150405.000000")
				t0 := time.Now()
				execPlugin(b, hostPath, c.bin, c.cniPath, "ADD", conf, id, contPath)
				t1 := time.Now()
				execPlugin(b, hostPath, c.bin, c.cniPath, "DEL", conf, id, contPath)
				adds, dels = append(adds, t1.Sub(t0)), append(dels, time.Since(t1))
			}
			b.ReportMetric(median(adds), "add-ms")
			b.ReportMetric(median(dels), "del-ms")
		})
	}
}

func median(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}

// buildOurs builds the multi-call binary with a bridge link into a temp dir,
// so the benchmark measures this tree whatever bin/ holds.
func buildOurs(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "patchbay-plugins"), "./cmd/plugins")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build plugins: %v: %s", err, out)
	}
	out, err := exec.Command(filepath.Join(dir, "patchbay-plugins"), "types").Output()
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range strings.Fields(string(out)) {
		if err := os.Symlink("patchbay-plugins", filepath.Join(dir, t)); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

func hasType(b *testing.B, dir, typ string) bool {
	_, err := os.Lstat(filepath.Join(dir, typ))
	return err == nil
}

// execPlugin runs a plugin binary from inside the host netns (the child
// inherits the locked thread's namespace).
func execPlugin(b testing.TB, hostPath, bin, cniPath, cmd, conf, id, contPath string) string {
	b.Helper()
	var out, errb bytes.Buffer
	err := netns.Do(hostPath, func() error {
		c := exec.Command(bin)
		c.Env = []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + contPath, "CNI_IFNAME=eth0", "CNI_PATH=" + cniPath, "PATH=" + os.Getenv("PATH")}
		c.Stdin, c.Stdout, c.Stderr = strings.NewReader(conf), &out, &errb
		return c.Run()
	})
	if err != nil {
		b.Fatalf("%s %s: %v: %s %s", bin, cmd, err, out.String(), errb.String())
	}
	return out.String()
}
