package plugin

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/internal/lockfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// containerLock serializes operations on one container across processes
// (multi-net spec §7.3): an exclusive lock (internal/lockfile) on
// <cniDir>/<containerID>.lock (a bounded name for a long ID, as planPath).
type containerLock struct{ l *lockfile.Lock }

// lockContainer waits for the lock until ctx ends. The file may be removed
// by a DEL holding the lock; a waiter then locks the new file.
func lockContainer(ctx context.Context, cniDir, containerID string) (*containerLock, error) {
	l, err := lockfile.Acquire(ctx, filepath.Join(cniDir, atomicfile.BoundedName(containerID, ".lock", containerID)))
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", containerID, err)
	}
	return &containerLock{l: l}, nil
}

// unlock releases the lock; with remove the file is deleted first (while
// still held), for a container that is gone.
func (l *containerLock) unlock(remove bool) { l.l.Unlock(remove) }

// lockContainer takes the lock of the invocation's container for ADD, DEL
// and CHECK; failing to get it is an I/O failure (code 5).
func (inv *invocation) lockContainer(ctx context.Context) (*containerLock, error) {
	l, err := lockContainer(ctx, inv.cfg.CNIDir, inv.args.ContainerID)
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "%v", err)
	}
	return l, nil
}
