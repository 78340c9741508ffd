// Package lockfile is an exclusive lock between processes: flock(2) on a
// file that the last holder may remove, so per-object lock files do not
// pile up. A waiter that locked a file removed meanwhile sees that its inode
// is no longer the one at the path and locks the new file instead, so two
// holders never coexist. A killed holder's lock is released by the kernel;
// its file stays until the next holder removes it.
package lockfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Lock is a held lock.
type Lock struct {
	f    *os.File
	path string
}

// poll is how often a waiter retries: flock(2) has no timeout, and a
// blocking one could not honour ctx.
const poll = 5 * time.Millisecond

// TryLock takes the lock at path if it is free; (nil, nil) when another
// process holds it. The directory must exist.
func TryLock(path string) (*Lock, error) {
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, err
		}
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if err != unix.EINTR {
				break
			}
		}
		if errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, nil
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		var held, cur unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &cur) == nil && held.Ino == cur.Ino && held.Dev == cur.Dev {
			return &Lock{f: f, path: path}, nil
		}
		f.Close() // removed by its last holder meanwhile: lock the new file
	}
}

// Acquire waits for the lock until ctx ends.
func Acquire(ctx context.Context, path string) (*Lock, error) {
	for {
		l, err := TryLock(path)
		if l != nil || err != nil {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// SetInfo records who holds the lock (read by Info), replacing what an
// earlier holder wrote.
func (l *Lock) SetInfo(info string) error {
	if _, err := l.f.WriteAt([]byte(info), 0); err != nil {
		return err
	}
	return l.f.Truncate(int64(len(info)))
}

// Info returns what the current holder recorded with SetInfo ("" when
// nothing or no file). A holder records it just after locking, so right
// after a crash it may still be the dead holder's.
func Info(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 256))
	return string(b)
}

// Unlock releases the lock; with remove the file is deleted first, while
// still held, for an object that is gone or whose lock is rarely needed.
func (l *Lock) Unlock(remove bool) {
	if remove {
		os.Remove(l.path)
	}
	l.f.Close()
}
