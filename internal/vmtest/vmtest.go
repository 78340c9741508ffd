// Package vmtest runs tests that need kernel features this machine lacks
// (ipvlan, 8021q, dummy, vrf, bonding, bridge VLAN filtering, ...) inside a
// QEMU VM booting Debian's own kernel, and reports them as ordinary tests.
//
// A package with VM tests calls Main from its TestMain, and wraps the body of
// each such test in Run:
//
//	func TestMain(m *testing.M) { vmtest.Main(m) }
//
//	func TestIPVLAN(t *testing.T) {
//		vmtest.Run(t, func(t *testing.T) {
//			// runs inside the VM: real netns, netlink, our bin/, ...
//		})
//	}
//
// On the host, Run boots the package's VM on first use (one boot per test
// binary, ~3 s) and re-runs this test binary inside it with -test.run naming
// only this test; the inner run's output becomes this test's output and its
// failure this test's failure. Inside the VM, Run just calls the function.
// Tests without Run stay on the host. See README.md for how the VM is built
// and how to debug it.
package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// InVM reports whether this process runs inside the test VM.
func InVM() bool { return os.Getenv(guestEnv) == "1" }

// AgentMain makes a program usable as Options.Agent: call it first in main.
// Inside the VM, started as the agent, it serves the host and exits; in
// every other case it returns at once. (Main and Wrap call it for test
// binaries.)
func AgentMain() {
	if os.Getenv(agentEnv) == "1" {
		os.Unsetenv(agentEnv)
		os.Exit(serveGuest())
	}
}

// One VM per test binary, booted by the first Run on the host and stopped
// by Main after all tests ran.
var shared struct {
	mu      sync.Mutex
	inMain  bool
	base    Options // from MainWith
	machine *Machine
	err     error // a failed boot (twice) fails every later Run
}

// Main is the TestMain of a package with VM tests:
//
//	func TestMain(m *testing.M) { vmtest.Main(m) }
//
// It serves as the VM's agent when started as one, otherwise runs the tests
// and then stops the VM if one was booted.
func Main(m *testing.M) { os.Exit(Wrap(m.Run)) }

// MainWith is Main for a package whose VM needs more than the default,
// e.g. network cards: vmtest.MainWith(m, vmtest.Options{NICs: 2}). The
// environment's knobs (README) still apply on top.
func MainWith(m *testing.M, o Options) { os.Exit(WrapWith(o, m.Run)) }

// WrapWith is Wrap for a package whose VM needs more than the default
// (see MainWith).
func WrapWith(o Options, run func() int) int {
	shared.mu.Lock()
	shared.base = o
	shared.mu.Unlock()
	return Wrap(run)
}

// Wrap is Main for a TestMain that does more around m.Run:
//
//	os.Exit(vmtest.Wrap(func() int { setup(); defer teardown(); return m.Run() }))
//
// Inside the VM, started as the agent, it serves and exits; otherwise it
// runs run, stops the test binary's VM, if one was booted, and returns run's
// exit code (1 if stopping failed). With PATCHBAY_VM_KEEP=1 the VM's
// directory (console and QEMU logs) is kept and named on stderr.
func Wrap(run func() int) int {
	AgentMain()
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	m := shared.machine
	shared.machine = nil
	if m == nil {
		return code
	}
	if err := m.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if m.opts.Keep {
		fmt.Fprintf(os.Stderr, "vmtest: VM directory kept: %s\n", m.Dir())
	}
	return code
}

// optionsFromEnv reads the knobs documented in README.md over base.
func optionsFromEnv(base Options) Options {
	o := base
	if n, err := strconv.Atoi(os.Getenv("PATCHBAY_VM_CPUS")); err == nil {
		o.CPUs = n
	}
	if n, err := strconv.Atoi(os.Getenv("PATCHBAY_VM_MEMORY")); err == nil {
		o.MemoryMiB = n
	}
	o.Keep = o.Keep || os.Getenv("PATCHBAY_VM_KEEP") == "1"
	if os.Getenv("PATCHBAY_VM_CONSOLE") == "1" {
		o.Console = os.Stderr
	}
	return o
}

// machine returns the test binary's VM, booting it on first use. A VM that
// died (e.g. stopped after a hung command) is replaced by a new one.
func machine(t *testing.T) *Machine {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		t.Fatal("vmtest.Run needs `func TestMain(m *testing.M) { vmtest.Main(m) }` (or vmtest.Wrap) in the package: it serves inside the VM and stops the VM")
	}
	if shared.err != nil {
		t.Fatalf("vmtest: the VM failed to boot earlier: %v", shared.err)
	}
	if m := shared.machine; m != nil {
		if !m.Exited() {
			return m
		}
		_, werr := m.qemu.Exited()
		t.Logf("vmtest: the VM (QEMU pid %d) ended (%v); booting a new one", m.PID(), werr)
		m.Stop()
		shared.machine = nil
	}
	m, err := Start(optionsFromEnv(shared.base))
	if err != nil {
		// One more try: a boot can fail on a starved host (TCG); say so.
		t.Logf("vmtest: the VM failed to boot, trying once more: %v", err)
		if m, err = Start(optionsFromEnv(shared.base)); err != nil {
			shared.err = err
			t.Fatalf("vmtest: boot the VM (second try): %v", err)
		}
	}
	shared.machine = m
	t.Logf("vmtest: VM booted in %v (guest uptime %v; kernel %s, %d CPUs, QEMU pid %d)",
		m.Boot.Round(time.Millisecond), m.GuestUptime, m.Release, m.opts.CPUs, m.PID())
	return m
}

// Run runs fn as this test inside the VM. On the host it runs only this test
// (t.Name(), and the part of -run that selects its subtests) in the test
// binary's VM and fails t when that run fails, panics or times out; its
// output, verbose, becomes t's output (shown with -v or on failure). Inside
// the VM it calls fn(t).
//
// Call it at the start of a top-level test: anything before it runs both on
// the host and in the VM. Parallel tests may call it concurrently; the VM
// runs them side by side. The inner run's -test.timeout is this test
// binary's remaining time minus a margin, so a hang inside ends in the inner
// run's own timeout panic, with its goroutines, before the host's; the
// environment variable PATCHBAY_VM_TEST_TIMEOUT (a duration) lowers it.
func Run(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	if InVM() {
		fn(t)
		return
	}
	m := machine(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	args := []string{exe, "-test.run=" + runPattern(t.Name(), flagValue("test.run")), "-test.count=1",
		"-test.v=true", "-test.paniconexit0"}
	inner, err := time.ParseDuration(os.Getenv("PATCHBAY_VM_TEST_TIMEOUT"))
	if err != nil && os.Getenv("PATCHBAY_VM_TEST_TIMEOUT") != "" {
		t.Fatalf("vmtest: PATCHBAY_VM_TEST_TIMEOUT: %v", err)
	}
	if deadline, ok := t.Deadline(); ok {
		left := time.Until(deadline)
		if fit := left - 5*time.Second - left/20; inner == 0 || fit < inner {
			inner = fit
		}
		if inner < time.Second {
			t.Fatalf("vmtest: only %v left before the test binary's -timeout", left.Round(time.Second))
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-2*time.Second))
		defer cancel()
	}
	if inner > 0 {
		args = append(args, "-test.timeout="+inner.Round(time.Millisecond).String())
	}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	if skip := flagValue("test.skip"); skip != "" {
		args = append(args, "-test.skip="+skip)
	}
	out := &resultScanner{w: t.Output(), name: t.Name()}
	code, err := m.Exec(ctx, Command{Args: args, Stdout: out, Stderr: out})
	out.flush()
	switch {
	case err != nil:
		t.Fatalf("vmtest: %s in the VM: %v", t.Name(), err)
	case code != 0:
		t.Fatalf("vmtest: %s failed inside the VM (exit status %d); its output is above", t.Name(), code)
	case out.result == "SKIP":
		t.Skip("vmtest: skipped inside the VM; its output is above")
	case out.result != "PASS":
		t.Fatalf("vmtest: %s did not run inside the VM (no result line for it; -test.run was %q)", t.Name(), args[1])
	}
}

func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// runPattern selects exactly the test named name (a "/"-path of subtests),
// and below it whatever the host's own -run pattern selects at deeper levels.
func runPattern(name, hostRun string) string {
	elems := strings.Split(name, "/")
	for i, e := range elems {
		elems[i] = "^" + regexp.QuoteMeta(e) + "$"
	}
	if deeper := splitPattern(hostRun); len(deeper) > len(elems) {
		elems = append(elems, deeper[len(elems):]...)
	}
	return strings.Join(elems, "/")
}

// splitPattern splits a -run pattern at the slashes outside brackets and
// parentheses, as package testing does.
func splitPattern(p string) []string {
	if p == "" {
		return nil
	}
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '[', '(':
			depth++
		case ']', ')':
			if depth > 0 {
				depth--
			}
		case '/':
			if depth == 0 {
				parts = append(parts, p[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, p[start:])
}

// resultScanner passes the inner run's output through and notes the result
// line of the test it ran ("--- PASS: name (...)", indented for subtests).
type resultScanner struct {
	w       io.Writer
	name    string
	partial []byte
	result  string
}

func (s *resultScanner) Write(p []byte) (int, error) {
	s.w.Write(p)
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		s.scan(string(s.partial[:i]))
		s.partial = s.partial[i+1:]
	}
	return len(p), nil
}

func (s *resultScanner) scan(line string) {
	line = strings.TrimLeft(line, " ")
	for _, r := range []string{"PASS", "FAIL", "SKIP"} {
		if strings.HasPrefix(line, "--- "+r+": "+s.name+" (") {
			s.result = r
		}
	}
}

// flush ends a last line without a newline (a crash mid-line).
func (s *resultScanner) flush() {
	if len(s.partial) > 0 {
		s.w.Write([]byte("\n"))
		sc := bufio.NewScanner(bytes.NewReader(s.partial))
		for sc.Scan() {
			s.scan(sc.Text())
		}
		s.partial = nil
	}
}
