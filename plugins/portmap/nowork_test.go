package portmap

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// execPlugin runs this test binary as the plugin inside the named netns,
// optionally under strace, and returns stdout and the exit error.
func execPlugin(t *testing.T, ns string, straceOut string, cmd, cid, cnetns string, conf []byte) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"netns", "exec", ns}
	if straceOut != "" {
		args = append(args, "strace", "-f", "-qq", "-e", "trace=socket", "-o", straceOut)
	}
	c := exec.Command("ip", append(args, self)...)
	c.Env = append(os.Environ(), asPluginEnv+"=1", "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+cid,
		"CNI_IFNAME=eth0", "CNI_NETNS="+cnetns, "CNI_PATH=/nonexistent")
	c.Stdin = bytes.NewReader(conf)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Logf("stderr: %s", stderr.String())
	}
	return string(out), err
}

// TestNoMappingsNoWork: with no portMappings, ADD, CHECK and DEL (both
// backends) make no socket at all — strace shows no socket(2) call — and
// nothing appears in the host netns's nftables or iptables.
func TestNoMappingsNoWork(t *testing.T) {
	tp := newTopo(t, 1)
	c0 := tp.c[0]
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatal("strace is needed to prove that no socket is opened")
	}
	dir := t.TempDir()
	for _, b := range []string{"nftables", "iptables"} {
		for _, maps := range [][]spec.PortMapping{nil, {}} {
			conf := netConf(t, c0.prevResult(), maps, map[string]any{"backend": b})
			for _, cmd := range []string{"ADD", "CHECK", "DEL"} {
				trace := filepath.Join(dir, b+cmd+".trace")
				out, err := execPlugin(t, tp.host, trace, cmd, "ctr0", c0.path, conf)
				if err != nil {
					t.Fatalf("%s %s: %v: %s", b, cmd, err, out)
				}
				if cmd == "ADD" && !strings.Contains(out, c0.ip4) {
					t.Fatalf("ADD did not pass prevResult through: %s", out)
				}
				tr, err := os.ReadFile(trace)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(tr), "socket(") {
					t.Fatalf("%s %s without mappings opened a socket:\n%s", b, cmd, tr)
				}
			}
		}
	}
	if rs := ruleset(t, tp.host); strings.TrimSpace(rs) != "" {
		t.Fatalf("nftables ruleset of the host netns is not empty:\n%s", rs)
	}
	if v4 := natRules(t, tp.host, false); strings.Contains(v4, "PB-") {
		t.Fatalf("iptables nat has our chains:\n%s", v4)
	}
	// Control: the same run with a mapping does open sockets, so the trace
	// would have seen them.
	conf := netConf(t, c0.prevResult(), []spec.PortMapping{{HostPort: 8080, ContainerPort: 80}}, nil)
	trace := filepath.Join(dir, "control.trace")
	if out, err := execPlugin(t, tp.host, trace, "ADD", "ctr0", c0.path, conf); err != nil {
		t.Fatalf("control ADD: %v: %s", err, out)
	}
	if tr, _ := os.ReadFile(trace); !strings.Contains(string(tr), "socket(AF_NETLINK") {
		t.Fatalf("control ADD shows no netlink socket in its trace:\n%s", tr)
	}
	if _, err := execPlugin(t, tp.host, "", "DEL", "ctr0", c0.path, conf); err != nil {
		t.Fatal(err)
	}
}
