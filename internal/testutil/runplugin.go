package testutil

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/rundir"
	"github.com/patchbay-cni/patchbay/skel"
)

// RunPlugin runs one invocation of plugin p in-process, inside the network
// namespace at nsPath ("" for the caller's), with env holding the CNI_*
// variables (CNI_PATH defaults to a directory that does not exist), and
// returns its stdout and exit code; its stderr goes to the test log. The
// plugin, and the delegates it execs, also get Isolate's settings.
func RunPlugin(t testing.TB, p skel.Plugin, nsPath string, env map[string]string, config string) (string, int) {
	t.Helper()
	e := skel.Env(isolated(map[string]string{"CNI_PATH": "/nonexistent"}))
	for k, v := range env {
		e[k] = v
	}
	var out, errb bytes.Buffer
	code := -1
	run := func() error {
		code = skel.Run(context.Background(), p, e, strings.NewReader(config), &out, &errb)
		return nil
	}
	if nsPath == "" {
		run()
	} else if err := netns.Do(nsPath, run); err != nil {
		t.Fatalf("enter %s: %v", nsPath, err)
	}
	if errb.Len() > 0 {
		t.Logf("%s %s stderr: %s", p.Type, e["CNI_COMMAND"], errb.String())
	}
	return out.String(), code
}

// RunRefPlugin runs the reference plugin binary of type typ (RefBin) as
// RunBinary does.
func RunRefPlugin(t testing.TB, typ, nsName string, env map[string]string, config string) (string, int) {
	t.Helper()
	return RunBinary(t, filepath.Join(RefBin(t), typ), nsName, env, config)
}

// RunBinary runs the plugin executable bin (ours, a reference's) inside the
// named network namespace ("" for the caller's) with env as its whole
// environment (CNI_PATH defaults to a directory that does not exist) and
// config on stdin, and returns its stdout and exit code; its stderr goes
// to the test log. Safe from any goroutine: a binary that cannot be run is
// an error of the test and exit code -1.
func RunBinary(t testing.TB, bin, nsName string, env map[string]string, config string) (string, int) {
	t.Helper()
	c := exec.Command(bin)
	if nsName != "" {
		c = exec.Command("ip", "netns", "exec", nsName, bin)
	}
	e := isolated(map[string]string{"CNI_PATH": "/nonexistent"})
	for k, v := range env {
		e[k] = v
	}
	for k, v := range e {
		c.Env = append(c.Env, k+"="+v)
	}
	c.Stdin = strings.NewReader(config)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	if errb.Len() > 0 {
		t.Logf("%s %s stderr: %s", filepath.Base(bin), env["CNI_COMMAND"], errb.String())
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Errorf("run %s: %v", bin, err)
		return out.String(), -1
	}
	return out.String(), c.ProcessState.ExitCode()
}

// isolated adds this process's run directory (Isolate's PATCHBAY_RUN_DIR)
// to env: skel hands the delegates a plugin execs only the environment
// the plugin was given, and a delegate of ours without it would take its
// locks in the machine's /run/cni/patchbay.
func isolated(env map[string]string) map[string]string {
	if v, ok := os.LookupEnv(rundir.Env); ok {
		env[rundir.Env] = v
	}
	return env
}
