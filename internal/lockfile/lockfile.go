// Package lockfile is an exclusive lock between processes: flock(2) on a
// file that the last holder may remove, so per-object lock files do not
// pile up. A waiter that locked a file removed meanwhile sees that its inode
// is no longer the one at the path and locks the new file instead, so two
// holders never coexist. A killed holder's lock is released by the kernel;
// its file stays until the next holder removes it.
//
// It works on raw descriptors: an os.File adds four fcntl calls per lock,
// and the lock is taken on every plugin verb (skel).
package lockfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Lock is a held lock.
type Lock struct {
	fd   int
	path string
}

// poll is how often a waiter retries: flock(2) has no timeout, and a
// blocking one could not honour ctx.
const poll = 5 * time.Millisecond

// TryLock takes the lock at path if it is free; (nil, nil) when another
// process holds it. A missing directory is created (0700).
func TryLock(path string) (*Lock, error) {
	for {
		fd, err := open(path)
		if err != nil {
			return nil, err
		}
		for {
			err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
			if err != unix.EINTR {
				break
			}
		}
		if errors.Is(err, unix.EWOULDBLOCK) {
			unix.Close(fd)
			return nil, nil
		}
		if err != nil {
			unix.Close(fd)
			return nil, &os.PathError{Op: "flock", Path: path, Err: err}
		}
		var held, cur unix.Stat_t
		if unix.Fstat(fd, &held) == nil && unix.Stat(path, &cur) == nil && held.Ino == cur.Ino && held.Dev == cur.Dev {
			return &Lock{fd: fd, path: path}, nil
		}
		unix.Close(fd) // removed by its last holder meanwhile: lock the new file
	}
}

func open(path string) (int, error) {
	for range 2 {
		fd, err := unix.Open(path, unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
		if err == unix.EINTR {
			continue
		}
		if err != unix.ENOENT {
			if err != nil {
				return -1, &os.PathError{Op: "open", Path: path, Err: err}
			}
			return fd, nil
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return -1, err
		}
	}
	return -1, &os.PathError{Op: "open", Path: path, Err: unix.ENOENT}
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

// SetInfo records who holds the lock, one line read back by Info (a line,
// so that no truncate is needed over a longer line a killed holder left).
func (l *Lock) SetInfo(info string) error {
	_, err := unix.Pwrite(l.fd, []byte(info+"\n"), 0)
	return err
}

// Info returns what the current holder recorded with SetInfo ("" when
// nothing or no file). A holder records it just after locking, so right
// after a crash it may still be the dead holder's.
func Info(path string) string {
	b := make([]byte, 256)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	n, err := unix.Pread(fd, b, 0)
	if err != nil || n <= 0 {
		return ""
	}
	line, _, _ := bytes.Cut(b[:n], []byte("\n"))
	return string(line)
}

// Unlock releases the lock; with remove the file is deleted first, while
// still held, for an object that is gone or whose lock is rarely needed.
func (l *Lock) Unlock(remove bool) {
	if remove {
		unix.Unlink(l.path)
	}
	unix.Close(l.fd)
}
