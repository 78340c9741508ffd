// Package testutil holds helpers shared by tests: throwaway network
// namespaces, and the locations of our binaries and the reference peers that
// `make test` builds and installs.
package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// RequireRoot fails (never skips) when not root: these tests need namespaces.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (network namespaces); run it through `make test` as root")
	}
}

// NewNS creates a named network namespace (/run/netns/<name>) with lo up and
// removes it when the test ends, pass or fail. It returns name and path.
func NewNS(t testing.TB, prefix string) (string, string) {
	t.Helper()
	name, path := NewNSLoDown(t, prefix)
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up in %s: %v: %s", name, err, out)
	}
	return name, path
}

// NewNSLoDown is NewNS without bringing lo up (as a runtime hands a fresh
// namespace to the loopback plugin).
func NewNSLoDown(t testing.TB, prefix string) (string, string) {
	t.Helper()
	RequireRoot(t)
	b := make([]byte, 4)
	rand.Read(b)
	name := "pbt-" + prefix + "-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if _, err := os.Stat("/run/netns/" + name); os.IsNotExist(err) {
			return // the test deleted it itself (e.g. DEL after the netns is gone)
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return name, "/run/netns/" + name
}

// InNS runs a command inside the named namespace and returns its combined output.
func InNS(t testing.TB, name string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", name}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// FirewallState is everything iptables, ip6tables and nftables hold in the
// named namespace, without the tools' timestamp comments and packet
// counters: equal strings mean equal rule sets.
func FirewallState(t testing.TB, name string) string {
	t.Helper()
	var b strings.Builder
	for _, cmd := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"nft", "list", "ruleset"}} {
		out, err := InNS(t, name, cmd...)
		if err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if !strings.HasPrefix(l, "#") {
				b.WriteString(counters.ReplaceAllString(l, "") + "\n")
			}
		}
	}
	return b.String()
}

var counters = regexp.MustCompile(`\[\d+:\d+\]|packets \d+ bytes \d+`)

// dirFromEnv returns a directory named by an environment variable that
// `make test` sets, failing loudly when it is missing.
func dirFromEnv(t testing.TB, env, what string) string {
	t.Helper()
	d := os.Getenv(env)
	if d == "" {
		t.Fatalf("%s is not set: %s is prepared by `make test` (see Makefile)", env, what)
	}
	abs, err := filepath.Abs(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("%s=%s: %v (%s is prepared by `make test`)", env, d, err, what)
	}
	return abs
}

// OurBin is the directory holding our built executables (bin/).
func OurBin(t testing.TB) string { return dirFromEnv(t, "PATCHBAY_BIN", "our bin/ directory") }

// RefBin is the directory holding the reference plugins v1.9.1 and cnitool v1.3.1.
func RefBin(t testing.TB) string {
	return dirFromEnv(t, "PATCHBAY_REF_BIN", "the reference plugins and cnitool")
}

// Cnitool runs the reference cnitool inside the named host namespace with
// extra environment (NETCONFPATH, CNI_PATH, CAP_ARGS, ...). libcni's cache
// dir is fixed at /var/lib/cni, so cnitool runs in a private mount namespace
// where varlib (a temp dir) is bind-mounted over /var/lib: the machine's own
// /var/lib/cni is never touched. varlib/cni is where its cache lands.
func Cnitool(t testing.TB, hostNS, varlib string, env []string, args ...string) (string, error) {
	t.Helper()
	script := `mount --bind "$1" /var/lib && shift && exec ip netns exec "$@"`
	argv := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", varlib, hostNS,
		filepath.Join(RefBin(t), "cnitool")}, args...)
	cmd := exec.Command("unshare", argv...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
