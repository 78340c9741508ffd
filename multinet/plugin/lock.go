package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// containerLock serializes operations on one container across processes
// (multi-net spec §7.3): an exclusive flock on <cniDir>/<containerID>.lock
// (a bounded name for a long ID, as planPath).
type containerLock struct {
	f    *os.File
	path string
}

// lockContainer waits for the lock until ctx ends. The file may be removed
// by a DEL holding the lock; a waiter that then gets the lock on the removed
// inode retries on the new file.
func lockContainer(ctx context.Context, cniDir, containerID string) (*containerLock, error) {
	if err := os.MkdirAll(cniDir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(cniDir, atomicfile.BoundedName(containerID, ".lock", containerID))
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		for {
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) {
				break
			}
			select {
			case <-ctx.Done():
				f.Close()
				return nil, fmt.Errorf("waiting for the lock of container %s: %w", containerID, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		var held, cur syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &held) == nil && syscall.Stat(path, &cur) == nil && held.Ino == cur.Ino {
			return &containerLock{f: f, path: path}, nil
		}
		f.Close() // removed meanwhile: lock the new file
	}
}

// unlock releases the lock; with remove the file is deleted first (while
// still held), for a container that is gone.
func (l *containerLock) unlock(remove bool) {
	if remove {
		os.Remove(l.path)
	}
	l.f.Close()
}

// lockContainer takes the lock of the invocation's container for ADD, DEL
// and CHECK; failing to get it is an I/O failure (code 74).
func (inv *invocation) lockContainer(ctx context.Context) (*containerLock, error) {
	l, err := lockContainer(ctx, inv.cfg.CNIDir, inv.args.ContainerID)
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "multinet: %v", err)
	}
	return l, nil
}
