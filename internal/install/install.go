// Package install puts files on a node the way a running node needs them
// replaced: executables that the container runtime may be executing at that
// very moment, and configuration files it may be reading.
package install

import (
	"fmt"
	"os"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
)

// AtomicCopy installs the file src as dst: it writes a new file beside dst
// and renames it over dst, flushed to disk. A runtime executing or reading
// dst meanwhile keeps the old file (its inode lives on until the last user
// closes it) and the next exec gets the new one whole. Writing into dst
// instead fails with ETXTBSY ("text file busy") while any process runs it —
// the upgrade failure Multus users meet — and a reader could see half a
// file. The mode is src's (executable bits included); dst's directory must
// exist. A symbolic link at dst is replaced by the file.
func AtomicCopy(src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("install %s: %s is not a regular file", dst, src)
	}
	if err := atomicfile.WriteFrom(dst, f, st.Mode().Perm(), true); err != nil {
		return fmt.Errorf("install %s from %s: %w", dst, src, err)
	}
	return nil
}
