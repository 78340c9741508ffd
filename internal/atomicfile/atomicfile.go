// Package atomicfile writes state files so that a reader, or a process
// killed at any instant, sees the old content or the new, never a mix, and
// so that a kill leaves no stray file that a later DEL or GC cannot find:
//
//   - Write replaces a file: the content goes into an unnamed file
//     (O_TMPFILE), which is linked under one fixed temporary name per target
//     and renamed over the target. A kill before the link leaves nothing; a
//     kill between link and rename leaves the temporary, which Remove (what
//     DEL calls) and the next Write of the same target delete.
//   - CreateExclusive creates a file with its content only if the name is
//     free: the unnamed file is linked straight to the name (link(2) fails
//     if it exists), so the file never exists empty.
//
// File systems without O_TMPFILE get the same API with a named temporary
// file (the fixed name above) that IsTemp recognises for cleanup.
//
// BoundedName gives per-attachment files a name that fits in one path
// component for any key length.
package atomicfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// NameMax is the longest file name (one path component) Linux file systems
// accept.
const NameMax = 255

// tmpSuffix ends every temporary name; older versions appended a random
// number after it (".<name>.tmp-123"), which IsTemp also recognises.
const tmpSuffix = ".tmp"

// BoundedName returns name+ext when that fits in one path component, and
// otherwise "_" followed by the SHA-256 of the key parts (NUL-separated)
// and ext. The long form is collision-free for distinct keys and never
// equals a name that starts with an alphanumeric character, which every
// name built from a network name or container ID does (CNI requires both to
// start alphanumeric), so short keys keep the name other tools (libcni,
// the reference plugins) use and long ones cannot be confused with them.
func BoundedName(name, ext string, key ...string) string {
	if len(name)+len(ext) <= NameMax {
		return name + ext
	}
	return "_" + hashOf(key...) + ext
}

func hashOf(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:])
}

// TempPath is the temporary name Write and CreateExclusive use for path
// ("." + name + ".tmp", shortened to a hash when too long).
func TempPath(path string) string {
	dir, base := filepath.Split(path)
	name := "." + base + tmpSuffix
	if len(name) > NameMax {
		name = "._" + hashOf(base) + tmpSuffix
	}
	return filepath.Join(dir, name)
}

// IsTemp reports whether a directory entry name is a temporary of this
// package (or of its older versions), for directory-wide cleanups.
func IsTemp(name string) bool {
	if !strings.HasPrefix(name, ".") {
		return false
	}
	if strings.HasSuffix(name, tmpSuffix) {
		return true
	}
	i := strings.LastIndex(name, tmpSuffix+"-")
	if i < 0 {
		return false
	}
	digits := name[i+len(tmpSuffix)+1:]
	return digits != "" && strings.Trim(digits, "0123456789") == ""
}

// RemoveTemps deletes every temporary (IsTemp) in dir; a missing dir is
// fine. It is for GC-style sweeps: a writer whose temporary disappears
// retries (see Write).
func RemoveTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if IsTemp(e.Name()) && !e.IsDir() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Remove deletes path and its temporary; missing files are fine. A name too
// long to exist (ENAMETOOLONG) counts as missing.
func Remove(path string) error {
	var errs []error
	for _, p := range []string{path, TempPath(path)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENAMETOOLONG) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// attempts bounds Write's retries when a concurrent writer of the same
// target (or a sweep) takes the temporary name away.
const attempts = 8

// Write replaces path with data (mode perm). With sync the data and the
// rename are flushed to disk before returning; state files on the ADD/DEL
// path skip that (it costs 1-10 ms per write on ext4, and what they describe
// — network namespaces, links — does not survive the power loss that could
// lose them; readers treat an empty or corrupt file as missing).
//
// Concurrent writers of one target each leave a complete file; which one
// wins is unspecified.
func Write(path string, data []byte, perm os.FileMode, sync bool) error {
	return WriteFrom(path, bytes.NewReader(data), perm, sync)
}

// WriteFrom is Write with the content read from r (a large file, an
// executable being installed, is streamed rather than held in memory). r
// is read again from its start when a concurrent writer forces a retry.
func WriteFrom(path string, r io.ReadSeeker, perm os.FileMode, sync bool) error {
	tmp := TempPath(path)
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		var retry bool
		if _, err = r.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if retry, err = write(path, tmp, r, perm, sync); !retry {
			break
		}
	}
	if err != nil {
		return err
	}
	if sync {
		if d, err := os.Open(filepath.Dir(path)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return nil
}

// write makes one attempt; retry is set when a concurrent writer of the
// same target (or a sweep) took the temporary name away meanwhile. An
// unnamed file, once linked and unlinked, cannot be linked again, so a
// retry starts over with a new one.
func write(path, tmp string, r io.Reader, perm os.FileMode, sync bool) (retry bool, err error) {
	f, named, err := content(tmp, r, perm, sync)
	if err != nil {
		return false, err
	}
	if !named {
		err := linkFile(f, tmp)
		if errors.Is(err, fs.ErrExist) {
			// A killed writer's leftover, or a concurrent writer's.
			os.Remove(tmp)
			err = linkFile(f, tmp)
		}
		if err != nil {
			f.Close()
			return errors.Is(err, fs.ErrExist), err
		}
	}
	// Closed before the rename: an executable that can be exec'd under
	// path while a writer still holds it open fails with ETXTBSY.
	st, statErr := f.Stat()
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return false, err
	}
	err = os.Rename(tmp, path)
	if errors.Is(err, fs.ErrNotExist) {
		if cur, err := os.Stat(path); statErr == nil && err == nil && os.SameFile(st, cur) {
			return false, nil // a concurrent writer renamed ours into place
		}
		return true, fmt.Errorf("write %s: temporary %s was removed concurrently", path, tmp)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return false, err
}

// CreateExclusive creates path holding data (mode perm) if no file of that
// name exists, in one step: created is false, with no error, when the name
// is taken. The file never exists without its content.
func CreateExclusive(path string, data []byte, perm os.FileMode) (created bool, err error) {
	tmp := TempPath(path)
	f, named, err := content(tmp, bytes.NewReader(data), perm, false)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if named {
		err = os.Link(tmp, path)
		os.Remove(tmp)
	} else {
		err = linkFile(f, path)
	}
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// content returns an open file holding r's content with mode perm: unnamed
// (O_TMPFILE) where the file system supports it, else created under tmp
// (named is then true).
func content(tmp string, r io.Reader, perm os.FileMode, sync bool) (f *os.File, named bool, err error) {
	dir := filepath.Dir(tmp)
	fd, err := -1, unix.EOPNOTSUPP
	if tmpfile {
		fd, err = unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, uint32(perm.Perm()))
	}
	switch {
	case err == nil:
		f = os.NewFile(uintptr(fd), tmp)
	case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL):
		// No O_TMPFILE here (older kernels report EISDIR or EINVAL).
		named = true
		for range 2 {
			f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm.Perm())
			if !errors.Is(err, fs.ErrExist) {
				break
			}
			os.Remove(tmp) // a killed writer's leftover
		}
		if err != nil {
			return nil, false, err
		}
	default:
		return nil, false, &fs.PathError{Op: "create temporary file in", Path: dir, Err: err}
	}
	fail := func(err error) (*os.File, bool, error) {
		f.Close()
		if named {
			os.Remove(tmp)
		}
		return nil, false, err
	}
	if _, err := io.Copy(f, r); err != nil {
		return fail(err)
	}
	// Explicit chmod: the mode given at creation is filtered by the umask.
	if err := f.Chmod(perm.Perm()); err != nil {
		return fail(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	return f, named, nil
}

// tmpfile is false only in tests of the named-temporary fallback.
var tmpfile = true

// linkFile gives the unnamed file f the name path; it fails with EEXIST if
// the name is taken.
func linkFile(f *os.File, path string) error {
	err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	if err != nil {
		return &os.LinkError{Op: "link", Old: f.Name(), New: path, Err: err}
	}
	return nil
}
