package lockfile

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func TestLockInfoAndRemoval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.lock") // the directory is created
	l, err := TryLock(path)
	if err != nil || l == nil {
		t.Fatalf("TryLock: %v, %v", l, err)
	}
	if err := l.SetInfo("DEL 123456789"); err != nil {
		t.Fatal(err)
	}
	l.Unlock(false) // a killed holder: the file and its info stay
	l, err = TryLock(path)
	if err != nil || l == nil {
		t.Fatalf("TryLock after release: %v, %v", l, err)
	}
	l.SetInfo("ADD 7") // shorter than the stale line
	if got := Info(path); got != "ADD 7" {
		t.Errorf("Info = %q", got)
	}
	if l2, err := TryLock(path); l2 != nil || err != nil {
		t.Fatalf("second holder: %v, %v", l2, err)
	}
	got := make(chan *Lock)
	go func() {
		l2, err := Acquire(context.Background(), path)
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	time.Sleep(20 * time.Millisecond)
	l.Unlock(true)
	l2 := <-got
	if l3, _ := TryLock(path); l3 != nil {
		t.Fatal("a third holder got in after the file was replaced")
	}
	l2.Unlock(true)
	if Info(path) != "" {
		t.Error("file left after Unlock(true)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	l4, _ := TryLock(path)
	if _, err := Acquire(ctx, path); err == nil {
		t.Error("Acquire succeeded while held")
	}
	l4.Unlock(true)
}
