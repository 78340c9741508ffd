package invoke

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// waitFile waits (bounded) for a file the plugin script creates.
func waitFile(path string) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return true
		}
	}
	return false
}

// ExecHeld starts the plugin before hold is called (the plugin is running
// while the caller decides), and gives it what hold returns.
func TestExecHeldRunsThePluginWithWhatHoldReturns(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	p := script(t, dir, "p", `touch "`+started+`"; echo "$CNI_COMMAND"; cat`)
	out, err := ExecHeld(context.Background(), p, []string{"CNI_COMMAND=ADD"}, func(context.Context) ([]byte, error) {
		if !waitFile(started) {
			t.Error("the plugin had not started when hold was called")
		}
		return []byte(`{"cniVersion":"1.0.0"}`), nil
	}, nil)
	if err != nil || string(out) != "ADD\n"+`{"cniVersion":"1.0.0"}` {
		t.Fatalf("ExecHeld = %q, %v", out, err)
	}
}

// When hold fails, the held plugin is killed without receiving anything,
// not even the end of its stdin (on which it could act), and hold's error
// is returned.
func TestExecHeldKillsThePluginWhenHoldFails(t *testing.T) {
	dir := t.TempDir()
	started, got := filepath.Join(dir, "started"), filepath.Join(dir, "got")
	p := script(t, dir, "p", `touch "`+started+`"; cat > "`+got+`"; echo "stdin ended" >> "`+got+`"`)
	refused := spec.Errorf(spec.ErrInvalidNetworkConfig, "the pod is refused")
	start := time.Now()
	_, err := ExecHeld(context.Background(), p, nil, func(context.Context) ([]byte, error) {
		waitFile(started)
		return nil, refused
	}, nil)
	if !errors.Is(err, refused) {
		t.Fatalf("ExecHeld = %v, want hold's error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("ExecHeld took %v after hold failed", d)
	}
	time.Sleep(100 * time.Millisecond) // a plugin that was not killed would write now
	if b, _ := os.ReadFile(got); len(b) != 0 {
		t.Errorf("the refused plugin read its stdin to the end and went on: %q", b)
	}
}

// hold honours the context: a plugin held past its deadline is killed and
// the error is the deadline's.
func TestExecHeldContext(t *testing.T) {
	dir := t.TempDir()
	p := script(t, dir, "p", `cat`)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := ExecHeld(ctx, p, nil, func(ctx context.Context) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ExecHeld = %v, want the deadline", err)
	}
}
