package policy

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/patchbay-cni/patchbay/spec"
)

// Source is where a configuration takes its policy from: the "nadPolicy"
// object, the file "nadPolicyFile", or neither (the built-in policy).
type Source struct {
	Inline json.RawMessage
	File   string
}

// maxFileSize bounds a policy file.
const maxFileSize = 1 << 20

// Parsed policies are kept per process: the daemon serves every request
// with the same configuration and must not parse it each time; a file is
// read again when it changes (a ConfigMap volume replaces it by swapping
// a symbolic link, which changes the inode), so an edited policy applies
// without a restart.
var cache = struct {
	sync.Mutex
	inline map[string]*Policy
	files  map[string]fileEntry
}{inline: map[string]*Policy{}, files: map[string]fileEntry{}}

type fileEntry struct {
	stamp [5]int64
	p     *Policy
}

const maxCached = 16

// Load returns the source's policy. Errors are CNI errors naming the key
// (code 7 for a policy that does not parse, 5 for a file that cannot be
// read).
func (s Source) Load() (*Policy, error) {
	switch {
	case len(s.Inline) > 0 && s.File != "":
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "nadPolicy and nadPolicyFile are both set: give one")
	case len(s.Inline) > 0:
		return loadInline(s.Inline)
	case s.File != "":
		return loadFile(s.File)
	}
	return Default(), nil
}

func loadInline(raw json.RawMessage) (*Policy, error) {
	key := string(raw)
	cache.Lock()
	p := cache.inline[key]
	cache.Unlock()
	if p != nil {
		return p, nil
	}
	p, err := Parse(raw, "nadPolicy")
	if err != nil {
		return nil, err
	}
	cache.Lock()
	if len(cache.inline) >= maxCached {
		clear(cache.inline)
	}
	cache.inline[key] = p
	cache.Unlock()
	return p, nil
}

func loadFile(path string) (*Policy, error) {
	source := "nadPolicyFile " + path
	f, err := os.Open(path)
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "%s: cannot be read: %v", source, err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "%s: cannot be read: %v", source, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s: is not a regular file", source)
	}
	stamp := [5]int64{int64(st.Dev), int64(st.Ino), st.Size, st.Mtim.Sec, st.Mtim.Nsec}
	cache.Lock()
	e, ok := cache.files[path]
	cache.Unlock()
	if ok && e.stamp == stamp {
		return e.p, nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "%s: cannot be read: %v", source, err)
	}
	if len(data) > maxFileSize {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s: is larger than %d bytes", source, maxFileSize)
	}
	p, err := Parse(data, source)
	if err != nil {
		return nil, err
	}
	cache.Lock()
	if len(cache.files) >= maxCached {
		clear(cache.files)
	}
	cache.files[path] = fileEntry{stamp, p}
	cache.Unlock()
	return p, nil
}

// String names the source for logs.
func (s Source) String() string {
	switch {
	case len(s.Inline) > 0:
		return "nadPolicy"
	case s.File != "":
		return fmt.Sprintf("nadPolicyFile %s", s.File)
	}
	return "built-in policy"
}
