package hostlocal

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// TestMain lets the test binary act as the plugin process, so tests can
// start many real processes without a prior build.
func TestMain(m *testing.M) {
	if os.Getenv("PATCHBAY_TEST_AS_HOSTLOCAL") == "1" {
		env := skel.EnvFromOS()
		delete(env, "PATCHBAY_TEST_AS_HOSTLOCAL")
		os.Exit(skel.Run(context.Background(), Plugin(), env, os.Stdin, os.Stdout, os.Stderr))
	}
	testutil.Main(m)
}

// testConf builds a network config with the given ipam body (without braces).
func testConf(dataDir, ipam string, extra ...string) string {
	s := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"testnet","type":"bridge","ipam":{"type":"host-local","dataDir":%q,%s}`, dataDir, ipam)
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

type call struct {
	cmd, id, ifname, args string
}

// run invokes the plugin in-process and returns stdout and the exit code.
func run(t testing.TB, c call, conf string) (string, int) {
	t.Helper()
	if c.ifname == "" {
		c.ifname = "eth0"
	}
	env := skel.Env{
		"CNI_COMMAND": c.cmd, "CNI_CONTAINERID": c.id, "CNI_IFNAME": c.ifname,
		"CNI_NETNS": "/var/run/netns/none", "CNI_PATH": "/nonexistent", "CNI_ARGS": c.args,
	}
	var out, errb bytes.Buffer
	code := skel.Run(context.Background(), Plugin(), env, strings.NewReader(conf), &out, &errb)
	return out.String(), code
}

func mustAdd(t testing.TB, conf, id string, args ...string) *spec.Result {
	t.Helper()
	c := call{cmd: "ADD", id: id}
	if len(args) > 0 {
		c.args = args[0]
	}
	out, code := run(t, c, conf)
	if code != 0 {
		t.Fatalf("ADD %s failed: %s", id, out)
	}
	r, err := spec.ParseResult([]byte(out), "")
	if err != nil {
		t.Fatalf("ADD %s: bad result %s: %v", id, out, err)
	}
	return r
}

func mustVerb(t testing.TB, cmd, conf, id string) {
	t.Helper()
	if out, code := run(t, call{cmd: cmd, id: id}, conf); code != 0 {
		t.Fatalf("%s %s failed: %s", cmd, id, out)
	}
}

// wantErr runs c and checks it fails with code and a message containing every part.
func wantErr(t testing.TB, c call, conf string, code uint, parts ...string) *spec.Error {
	t.Helper()
	out, rc := run(t, c, conf)
	if rc == 0 {
		t.Fatalf("%s %s: expected error code %d, got success: %s", c.cmd, c.id, code, out)
	}
	e, ok := spec.ParseError([]byte(out))
	if !ok {
		t.Fatalf("%s: not an error result: %s", c.cmd, out)
	}
	if e.Code != code {
		t.Errorf("%s %s: code %d, want %d (%s)", c.cmd, c.id, e.Code, code, e.Msg)
	}
	for _, p := range parts {
		if !strings.Contains(e.Msg, p) {
			t.Errorf("%s %s: message %q does not mention %q", c.cmd, c.id, e.Msg, p)
		}
	}
	return e
}

func addrs(r *spec.Result) []string {
	var out []string
	for _, ip := range r.IPs {
		out = append(out, ip.Address.String())
	}
	return out
}

// readIPFile returns the content of the per-IP file, "" when absent.
func readIPFile(t testing.TB, dir, ip string) string {
	t.Helper()
	b, err := os.ReadFile(dir + "/testnet/" + ip)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// execPlugin runs a plugin binary (ours: the test binary in plugin mode).
func execPlugin(t testing.TB, bin string, c call, conf string) (string, error) {
	t.Helper()
	if c.ifname == "" {
		c.ifname = "eth0"
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"CNI_COMMAND=" + c.cmd, "CNI_CONTAINERID=" + c.id, "CNI_IFNAME=" + c.ifname,
		"CNI_NETNS=/var/run/netns/none", "CNI_PATH=/nonexistent", "CNI_ARGS=" + c.args}
	if bin == os.Args[0] {
		cmd.Env = append(cmd.Env, "PATCHBAY_TEST_AS_HOSTLOCAL=1")
	}
	cmd.Stdin = strings.NewReader(conf)
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	return out.String(), err
}
