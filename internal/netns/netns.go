// Package netns runs code inside a network namespace given by path.
package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/spec"
)

// Do runs f with the calling goroutine's OS thread switched into the network
// namespace at path, then switches back. If switching back fails, the thread
// stays locked so the Go runtime discards it instead of reusing a thread in
// the wrong namespace.
func Do(path string, f func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open netns %q: %w", path, err)
	}
	defer target.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(target.Fd()), &st); err != nil {
		return fmt.Errorf("stat netns %q: %w", path, err)
	}
	if st.Type != unix.NSFS_MAGIC && st.Type != unix.PROC_SUPER_MAGIC {
		return fmt.Errorf("%q is not a network namespace", path)
	}

	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current netns: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %q: %w", path, err)
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it dies with this goroutine.
		return fmt.Errorf("return from netns %q: %w (inner error: %v)", path, err, ferr)
	}
	runtime.UnlockOSThread()
	return ferr
}

// Exists reports whether path is a usable network namespace reference.
func Exists(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC || st.Type == unix.PROC_SUPER_MAGIC
}

// Gone reports whether path no longer names a network namespace (the
// runtime deleted it, or it never existed).
func Gone(path string) bool {
	_, err := os.Stat(path)
	return errors.Is(err, os.ErrNotExist) || !Exists(path)
}

// CNIError turns a failure inside the namespace at path into a CNI error:
// CNI errors pass through; a vanished namespace is code 3 (unknown
// container); anything else is code 999 naming the namespace. (No plugin
// name: the runtime names the plugin, see skel's package doc.)
func CNIError(path string, err error) error {
	if err == nil {
		return nil
	}
	var ce *spec.Error
	if errors.As(err, &ce) {
		return err
	}
	if Gone(path) {
		return spec.Errorf(spec.ErrUnknownContainer, "network namespace %q does not exist: %v", path, err)
	}
	return spec.Errorf(spec.ErrInternal, "in network namespace %s: %v", path, err)
}
