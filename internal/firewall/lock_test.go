package firewall

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/rundir"
)

// TestWithLock: the lock is a file in the run directory (which TestMain
// points at a temporary directory: nothing lands in the machine's /run),
// made with its directory when missing; a second holder waits until its
// context ends and then fails without running f; once free, it runs.
func TestWithLock(t *testing.T) {
	name := filepath.Join("sub", "withlock-test.lock")
	if err := os.RemoveAll(rundir.Path("sub")); err != nil {
		t.Fatal(err)
	}
	err := WithLock(context.Background(), name, func() error {
		if _, err := os.Stat(rundir.Path(name)); err != nil {
			t.Errorf("lock file: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		ran := false
		err := WithLock(ctx, name, func() error { ran = true; return nil })
		if ran || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a second holder while the lock is held: ran %v, err %v; want it to wait and give up with its context", ran, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := WithLock(context.Background(), name, func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("the free lock: ran %v, err %v", ran, err)
	}
	if d := rundir.Dir(); d == rundir.Default || !filepath.IsAbs(d) {
		t.Fatalf("the tests' run directory is %q: TestMain should have moved it", d)
	}
}
