package install

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A binary that is being executed is replaced without ETXTBSY, the running
// process goes on with the old file, and the next exec runs the new one.
func TestAtomicCopyOverARunningExecutable(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "plugin")
	newSrc := filepath.Join(dir, "new")
	if err := os.WriteFile(newSrc, []byte("#!/bin/sh\necho new\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The kernel denies writes to an executable being run (a script's
	// interpreter is the executable, so run a real binary).
	sleepBin, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := AtomicCopy(sleepBin, dst); err != nil {
		t.Fatal(err)
	}
	running := exec.Command(dst, "30")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { running.Process.Kill(); running.Wait() })
	time.Sleep(50 * time.Millisecond) // exec'd: the kernel now denies writes to that inode

	// The naive way fails: this is what the installer must not do.
	if err := os.WriteFile(dst, []byte("x"), 0o755); !errors.Is(err, syscall.ETXTBSY) {
		t.Fatalf("writing into a running executable: %v, want ETXTBSY (the test would prove nothing)", err)
	}
	if err := AtomicCopy(newSrc, dst); err != nil {
		t.Fatalf("AtomicCopy over a running executable: %v", err)
	}
	out, err := exec.Command(dst).Output()
	if err != nil || strings.TrimSpace(string(out)) != "new" {
		t.Fatalf("the next exec ran %q, %v; want the new file", out, err)
	}
	if running.ProcessState != nil {
		t.Fatal("the running process was disturbed")
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755 (src's)", st.Mode())
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

// Execs racing with the installs always run a whole file, old or new. They
// run in another process, as the container runtime does: a child forked by
// this process while it writes the temporary file would inherit that
// file's write descriptor until its own exec (golang/go#22315), which says
// nothing about the installer.
func TestAtomicCopyWhileExecuting(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "plugin")
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("#!/bin/sh\necho a\n"), 0o755)
	os.WriteFile(b, []byte("#!/bin/sh\necho b\n"), 0o755)
	if err := AtomicCopy(a, dst); err != nil {
		t.Fatal(err)
	}
	runner := exec.Command("sh", "-c", `i=0; while [ $i -lt 300 ]; do "$0" || echo "exec failed: $?"; i=$((i+1)); done`, dst)
	var out bytes.Buffer
	runner.Stdout, runner.Stderr = &out, &out
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	installs := 0
	for exited := make(chan error, 1); ; installs++ {
		src := a
		if installs%2 == 1 {
			src = b
		}
		if err := AtomicCopy(src, dst); err != nil {
			t.Fatal(err)
		}
		if installs == 0 {
			go func() { exited <- runner.Wait() }()
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			seen := map[string]int{}
			for _, l := range lines {
				seen[l]++
			}
			if len(lines) != 300 || seen["a"]+seen["b"] != 300 {
				t.Fatalf("after %d installs, the execs printed %v", installs, seen)
			}
			t.Logf("%d installs during 300 execs: %v", installs, seen)
			return
		default:
		}
	}
}

func TestAtomicCopyErrors(t *testing.T) {
	dir := t.TempDir()
	if err := AtomicCopy(filepath.Join(dir, "missing"), filepath.Join(dir, "x")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing source: %v", err)
	}
	if err := AtomicCopy(dir, filepath.Join(dir, "x")); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory source: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	if err := AtomicCopy(filepath.Join(dir, "f"), filepath.Join(dir, "no", "such", "dir")); err == nil {
		t.Error("missing destination directory accepted")
	}
}
