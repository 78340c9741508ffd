package portmap

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
	"github.com/patchbay-cni/patchbay/spec"
)

// TestTimingVsReference runs ADD and DEL of one mapping as separate
// processes (as a runtime would), ours and the reference portmap v1.9.1,
// for both backends, inside the host test netns, and logs the medians. It
// also checks that each run really programmed and removed the DNAT.
func TestTimingVsReference(t *testing.T) {
	tp := newTopo(t, 1)
	c0 := tp.c[0]
	serve(t, c0.path, "tcp", ":80", "c0")
	ref := filepath.Join(testutil.RefBin(t), "portmap")
	ours, env := filepath.Join(os.Getenv("PATCHBAY_BIN"), "portmap"), []string(nil)
	if _, err := os.Stat(ours); err != nil || os.Getenv("PATCHBAY_BIN") == "" {
		// Not built yet: the test binary doubles as the plugin.
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		ours, env = self, []string{asPluginEnv + "=1"}
	}
	run := func(bin string, extraEnv []string, cmd string, conf []byte) time.Duration {
		c := exec.Command(bin)
		c.Env = append(append(os.Environ(), extraEnv...), "CNI_COMMAND="+cmd, "CNI_CONTAINERID=ctr0",
			"CNI_IFNAME=eth0", "CNI_NETNS="+c0.path, "CNI_PATH="+filepath.Dir(bin))
		c.Stdin = bytes.NewReader(conf)
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		var d time.Duration
		// The child inherits the netns of the thread that starts it.
		err := netns.Do(tp.hostPath, func() error {
			start := time.Now()
			err := c.Run()
			d = time.Since(start)
			return err
		})
		if err != nil {
			t.Fatalf("%s %s: %v: %s", bin, cmd, err, out.String())
		}
		return d
	}
	const n = 7
	for _, backend := range []string{"nftables", "iptables"} {
		// The reference needs an explicit protocol.
		conf := netConf(t, c0.prevResult(), []spec.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}, map[string]any{"backend": backend})
		for _, who := range []struct {
			name string
			bin  string
			env  []string
		}{{"ours", ours, env}, {"reference", ref, nil}} {
			var adds, dels []time.Duration
			for i := 0; i < n; i++ {
				adds = append(adds, run(who.bin, who.env, "ADD", conf))
				if i == 0 {
					expectDial(t, who.name+" "+backend, tp.clientPath, hp(hostClientIP4, "8080"), "c0 "+clientIP4)
				}
				dels = append(dels, run(who.bin, who.env, "DEL", conf))
			}
			if backend == "nftables" && strings.Contains(ruleset(t, tp.host), "dnat") {
				t.Fatalf("%s left DNAT rules after DEL", who.name)
			}
			slices.Sort(adds)
			slices.Sort(dels)
			t.Logf("%-9s %-8s ADD median %v (min %v)  DEL median %v (min %v)", who.name, backend,
				adds[n/2].Round(10*time.Microsecond), adds[0].Round(10*time.Microsecond),
				dels[n/2].Round(10*time.Microsecond), dels[0].Round(10*time.Microsecond))
		}
	}
}
