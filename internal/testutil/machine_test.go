package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/rundir"
)

// TestIsolate: Isolate moves the run directory and the system bus, and its
// check names a file that appeared in a watched directory (deep or not)
// and is still there, and nothing else: not what was there before, not a
// file that came and went, not the moved run directory's content.
func TestIsolate(t *testing.T) {
	t.Setenv(rundir.Env, "")
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "")
	top, deep := t.TempDir(), t.TempDir()
	old := MachineDirs
	t.Cleanup(func() { MachineDirs = old })
	MachineDirs = []struct {
		Path string
		Deep bool
	}{{top, false}, {deep, true}}
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(top, "before"))
	write(filepath.Join(deep, "a", "before"))

	done := Isolate()
	run := os.Getenv(rundir.Env)
	if run == "" || os.Getenv("DBUS_SYSTEM_BUS_ADDRESS") != NoSystemBus {
		t.Fatalf("Isolate set %s=%q, DBUS_SYSTEM_BUS_ADDRESS=%q", rundir.Env, run, os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"))
	}
	write(filepath.Join(run, "locks", "x.lock"))
	write(filepath.Join(top, "sub", "below-top")) // only "sub" counts: top is not deep
	write(filepath.Join(deep, "a", "new"))
	transient := filepath.Join(deep, "gone")
	write(transient)
	os.Remove(transient)
	locked := filepath.Join(deep, "in-progress.lock")
	write(locked)
	f, err := os.Open(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Another open file description: flock conflicts as between processes.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	err = done()
	if err == nil {
		t.Fatal("no leftovers reported")
	}
	msg := err.Error()
	for _, want := range []string{filepath.Join(top, "sub"), filepath.Join(deep, "a", "new")} {
		if !strings.Contains(msg, want+"\n") && !strings.HasSuffix(msg, want) {
			t.Errorf("%q not reported: %v", want, err)
		}
	}
	for _, not := range []string{"before", "below-top", "gone", "x.lock", "in-progress.lock"} {
		if strings.Contains(msg, not) {
			t.Errorf("%q reported: %v", not, err)
		}
	}
	if _, err := os.Stat(run); !os.IsNotExist(err) {
		t.Errorf("the temporary run directory %s is left: %v", run, err)
	}
}

// TestIsolateRemovesStaleRunDirs: the run directory of a test binary that
// is gone is removed by the next Isolate; a live process's stays.
func TestIsolateRemovesStaleRunDirs(t *testing.T) {
	t.Setenv(rundir.Env, "")
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "")
	old := MachineDirs
	t.Cleanup(func() { MachineDirs = old })
	MachineDirs = nil
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-1", runDirPrefix, gone.Process.Pid))
	live := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-1", runDirPrefix, os.Getpid()))
	for _, d := range []string{stale, live} {
		if err := os.MkdirAll(filepath.Join(d, "locks"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(live)
	defer os.RemoveAll(stale)
	if err := Isolate()(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale run directory is left: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live process's run directory was removed: %v", err)
	}
}
