package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestRunPattern(t *testing.T) {
	for _, c := range []struct{ name, hostRun, want string }{
		{"TestA", "", "^TestA$"},
		{"TestA", "TestA", "^TestA$"},
		{"TestA", "TestA/l2|l3", "^TestA$/l2|l3"},
		{"TestA/sub.x", "Test[/]A/sub/deep", `^TestA$/^sub\.x$/deep`},
		{"TestA", "Test(A/B)/c", "^TestA$/c"},
	} {
		if got := runPattern(c.name, c.hostRun); got != c.want {
			t.Errorf("runPattern(%q, %q) = %q, want %q", c.name, c.hostRun, got, c.want)
		}
	}
}

func TestFrames(t *testing.T) {
	var b []byte
	in := []frame{{frameStart, 7, []byte(`{"args":["x"]}`)}, {frameStdout, 1 << 31, nil}, {frameExit, 0, []byte("{}")}}
	for _, f := range in {
		b = appendFrame(b, f)
	}
	r := bufio.NewReader(bytes.NewReader(b))
	for _, want := range in {
		got, err := readFrame(r)
		if err != nil || got.kind != want.kind || got.id != want.id || !bytes.Equal(got.data, want.data) {
			t.Fatalf("read %+v, %v; want %+v", got, err, want)
		}
	}
	big := appendFrame(nil, frame{kind: frameStdout, data: make([]byte, maxPayload+1)})
	if _, err := readFrame(bufio.NewReader(bytes.NewReader(big))); err == nil {
		t.Fatal("an oversized frame was accepted")
	}
}

// exec runs args in the package's VM and returns its exit status and output.
func vmExec(t *testing.T, m *Machine, c Command) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	code, err := m.Exec(context.Background(), c)
	if err != nil {
		t.Fatalf("%q: %v", c.Args, err)
	}
	return code, stdout.String(), stderr.String()
}

// TestExec checks Machine.Exec on the package's VM: exit codes, output,
// environment, failures to start, concurrency, kills, and which files are
// shared with the host.
func TestExec(t *testing.T) {
	if InVM() {
		t.Fatal("TestExec checks the host side: run it on the host")
	}
	m := machine(t)
	t.Run("exit-status-and-streams", func(t *testing.T) {
		code, out, errOut := vmExec(t, m, Command{Args: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}})
		if code != 7 || out != "out\n" || errOut != "err\n" {
			t.Fatalf("got %d %q %q, want 7 \"out\\n\" \"err\\n\"", code, out, errOut)
		}
	})
	t.Run("merged-output-keeps-order", func(t *testing.T) {
		var b bytes.Buffer
		code, err := m.Exec(context.Background(), Command{Args: []string{"sh", "-c", "echo 1; echo 2 >&2; echo 3; echo 4 >&2"}, Stdout: &b, Stderr: &b})
		if err != nil || code != 0 || b.String() != "1\n2\n3\n4\n" {
			t.Fatalf("got %d, %v, %q", code, err, b.String())
		}
	})
	t.Run("env-and-dir", func(t *testing.T) {
		dir := t.TempDir()
		_, out, _ := vmExec(t, m, Command{Args: []string{"sh", "-c", `echo "$PATCHBAY_VM $FOO $(pwd)"`}, Env: []string{"FOO=bar", "PATH=/usr/bin:/bin"}, Dir: dir})
		if want := "1 bar " + dir + "\n"; out != want {
			t.Fatalf("got %q, want %q", out, want)
		}
		// The command is looked up in its own PATH, here a directory the
		// host made after the VM booted.
		if err := os.WriteFile(filepath.Join(dir, "vmtest-probe"), []byte("#!/bin/sh\necho probed\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if code, out, errOut := vmExec(t, m, Command{Args: []string{"vmtest-probe"}, Env: []string{"PATH=/usr/bin:" + dir}}); code != 0 || out != "probed\n" {
			t.Fatalf("got %d %q %q", code, out, errOut)
		}
	})
	t.Run("large-output", func(t *testing.T) {
		_, out, _ := vmExec(t, m, Command{Args: []string{"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x"}})
		if len(out) != 3000000 || strings.Trim(out, "x") != "" {
			t.Fatalf("got %d bytes", len(out))
		}
	})
	t.Run("start-failure", func(t *testing.T) {
		_, err := m.Exec(context.Background(), Command{Args: []string{"/nonexistent/tool"}})
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/tool") {
			t.Fatalf("got %v, want an error naming the command", err)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				code, out, _ := vmExec(t, m, Command{Args: []string{"sh", "-c", fmt.Sprintf("sleep 0.$((RANDOM %% 5)); echo %d; exit %d", i, i)}})
				if code != i || out != fmt.Sprintf("%d\n", i) {
					t.Errorf("command %d: got %d %q", i, code, out)
				}
			})
		}
		wg.Wait()
	})
	t.Run("kill-on-context-end", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		_, err := m.Exec(ctx, Command{Args: []string{"sh", "-c", "sleep 600 & sleep 600"}})
		if err == nil || time.Since(t0) > killGrace {
			t.Fatalf("got %v after %v, want a kill soon after 500ms", err, time.Since(t0))
		}
		// The VM is still usable, and nothing of that command is left.
		code, out, _ := vmExec(t, m, Command{Args: []string{"sh", "-c", "ps -o args | grep -c '^sleep 600' || true"}})
		if code != 0 || strings.TrimSpace(out) != "0" {
			t.Fatalf("after the kill: %d, %q sleeps left", code, out)
		}
	})
	t.Run("files", func(t *testing.T) {
		// The host's files are read-only underneath: a write lands in the
		// VM's overlay only. /run/vmtest is the host's Share directory.
		host := filepath.Join(t.TempDir(), "written-in-vm")
		shared := filepath.Join(GuestShare, "from-vm")
		code, _, errOut := vmExec(t, m, Command{Args: []string{"sh", "-c", "echo x >" + host + " && cat " + host + " && echo y >" + shared}})
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if _, err := os.Stat(host); !os.IsNotExist(err) {
			t.Fatalf("a write inside the VM reached the host's %s (%v)", host, err)
		}
		b, err := os.ReadFile(filepath.Join(m.Share(), "from-vm"))
		if err != nil || string(b) != "y\n" {
			t.Fatalf("share: %q, %v", b, err)
		}
	})
}

// TestHungVMIsStopped freezes QEMU while a command runs: the command's
// context ending must stop the VM (by PID) after killGrace, not hang.
func TestHungVMIsStopped(t *testing.T) {
	if InVM() {
		t.Fatal("run it on the host")
	}
	m, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	defer func(g time.Duration) { killGrace = g }(killGrace)
	killGrace = 2 * time.Second
	if code, _, _ := vmExec(t, m, Command{Args: []string{"true"}}); code != 0 {
		t.Fatalf("true: %d", code)
	}
	if err := syscall.Kill(m.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	t0 := time.Now()
	_, err = m.Exec(ctx, Command{Args: []string{"sleep", "600"}})
	if err == nil || !strings.Contains(err.Error(), "VM stopped") {
		t.Fatalf("got %v, want the VM stopped", err)
	}
	if !m.Exited() {
		t.Fatal("QEMU still runs")
	}
	if d := time.Since(t0); d > 20*time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestAgentPowersOffOnHangUp closes the host's end of the control channel
// (as the kernel does when the host process dies) and checks that the VM
// powers itself off, without any signal to QEMU.
func TestAgentPowersOffOnHangUp(t *testing.T) {
	if InVM() {
		t.Fatal("run it on the host")
	}
	m, err := Start(Options{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(m.Dir())
	defer m.Stop()
	m.conn.Close()
	select {
	case <-m.qemu.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the VM still runs 30 s after the host hung up")
	}
	b, _ := os.ReadFile(filepath.Join(m.Dir(), "console.log"))
	if !strings.Contains(string(b), "agent exited (0)") {
		t.Fatalf("console.log:\n%s", b)
	}
}
