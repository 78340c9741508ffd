package vmtest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/launch"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

// roleEnv makes this test binary play a part for a test that runs it as a
// child: "report" (TestRunReportsFailures) or "runner" (TestMain, for
// TestKillingTheRunnerKillsQEMU).
const roleEnv = "PATCHBAY_VMTEST_SELFTEST"

// requireHost fails tests that check the host side of vmtest when they run
// inside the VM (the whole package under `go test -exec vmrun`).
func requireHost(t *testing.T) {
	t.Helper()
	if vmtest.InVM() {
		t.Fatal("this test checks the host side of vmtest: run it on the host, not inside the VM")
	}
}

// TestRunReportsFailures runs this test binary on tests that fail, panic,
// hang and exit inside the VM, and checks each is reported on the host as
// that test's failure, with the inner output.
func TestRunReportsFailures(t *testing.T) {
	if os.Getenv(roleEnv) == "report" {
		misbehave(t)
		return
	}
	requireHost(t)
	exe, err := os.Executable()
	must(t, err)
	cmd := exec.Command(exe, "-test.run=^TestRunReportsFailures$", "-test.v", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), roleEnv+"=report", "PATCHBAY_VM_TEST_TIMEOUT=10s")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("child: %v, want exit status 1; output:\n%s", err, out)
	}
	for _, want := range []string{
		"--- PASS: TestRunReportsFailures/pass (",
		"fine inside the VM",
		"--- FAIL: TestRunReportsFailures/fail (",
		"deliberate failure",
		"TestRunReportsFailures/fail failed inside the VM (exit status 1)",
		"--- FAIL: TestRunReportsFailures/panic (",
		"panic: deliberate panic",
		"TestRunReportsFailures/panic failed inside the VM (exit status 2)",
		"--- FAIL: TestRunReportsFailures/hang (",
		"panic: test timed out after 10s",
		"TestRunReportsFailures/hang failed inside the VM (exit status 2)",
		"--- FAIL: TestRunReportsFailures/exit (",
		"TestRunReportsFailures/exit failed inside the VM (exit status 3)",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("child output:\n%s", out)
	}
}

// misbehave is TestRunReportsFailures in its child (and, through Run, in
// that child's VM).
func misbehave(t *testing.T) {
	t.Run("pass", func(t *testing.T) {
		vmtest.Run(t, func(t *testing.T) { t.Log("fine inside the VM") })
	})
	t.Run("fail", func(t *testing.T) {
		vmtest.Run(t, func(t *testing.T) { t.Error("deliberate failure") })
	})
	t.Run("panic", func(t *testing.T) {
		vmtest.Run(t, func(t *testing.T) { panic("deliberate panic") })
	})
	t.Run("hang", func(t *testing.T) {
		vmtest.Run(t, func(t *testing.T) { time.Sleep(time.Hour) })
	})
	t.Run("exit", func(t *testing.T) {
		vmtest.Run(t, func(t *testing.T) { os.Exit(3) })
	})
}

// runnerRole boots a VM, starts a command in it, prints QEMU's pid and
// waits to be killed.
func runnerRole() {
	m, err := vmtest.Start(vmtest.Options{})
	if err != nil {
		fmt.Printf("runner: %v\n", err)
		os.Exit(1)
	}
	go m.Exec(context.Background(), vmtest.Command{Args: []string{"sleep", "600"}})
	fmt.Printf("qemu-pid %d %s\n", m.PID(), m.Dir())
	time.Sleep(10 * time.Minute)
	os.Exit(1)
}

// TestKillingTheRunnerKillsQEMU SIGKILLs a process that runs a VM (no
// cleanup of its own can run) and checks that QEMU ends with it.
func TestKillingTheRunnerKillsQEMU(t *testing.T) {
	requireHost(t)
	exe, err := os.Executable()
	must(t, err)
	runner := exec.Command(exe, "-test.run=^$")
	runner.Env = append(os.Environ(), roleEnv+"=runner")
	stdout, err := runner.StdoutPipe()
	must(t, err)
	runner.Stderr = os.Stderr
	must(t, runner.Start())
	t.Cleanup(func() {
		runner.Process.Kill()
		runner.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			line <- s.Text()
		}
		close(line)
	}()
	var pid int
	var dir string
	select {
	case l := <-line:
		if _, err := fmt.Sscanf(l, "qemu-pid %d %s", &pid, &dir); err != nil {
			for more := range line { // the runner's error goes on with the VM's logs
				l += "\n" + more
			}
			t.Fatalf("runner said:\n%s", l)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the runner did not boot its VM within 3 minutes")
	}
	started := launch.StartTime(pid)
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); !strings.Contains(exe, "qemu-system") || started == "" {
		t.Fatalf("pid %d is %q, not QEMU", pid, exe)
	}
	t.Cleanup(func() { // only if the test failed, and only that very process
		if launch.StartTime(pid) == started {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	must(t, runner.Process.Signal(syscall.SIGKILL))
	runner.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for launch.StartTime(pid) == started {
		if time.Now().After(deadline) {
			t.Fatalf("QEMU (pid %d) still runs 10 s after its runner was SIGKILLed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The runner could not remove its VM's directory; the next Start does.
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the runner's VM directory: %v", err)
	}
	m, err := vmtest.Start(vmtest.Options{})
	must(t, err)
	must(t, m.Stop())
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the dead runner's VM directory %s is still there after a new Start (%v)", dir, err)
	}
}
