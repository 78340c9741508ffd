package hostlocal

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// On-disk layout of <dataDir>/<network>, shared with the reference host-local:
//
//	<ip>                  one file per allocated address, holding
//	                      "containerID\r\nifname" (older files: "containerID")
//	last_reserved_ip.<n>  the last address reserved from range set n
//	lock                  flock(2)ed around every operation
//
// The per-IP files are the truth. The index (see index.go) only makes
// lookups by attachment cheap.
const (
	lockName     = "lock"
	lastIPPrefix = "last_reserved_ip."
	lineBreak    = "\r\n"
)

// owner is the attachment an address belongs to. IfName is "" for files
// written by old reference versions, which held only the container ID.
type owner struct {
	ID, IfName string
}

func (o owner) String() string {
	if o.IfName == "" {
		return fmt.Sprintf("container %q", o.ID)
	}
	return fmt.Sprintf("container %q interface %q", o.ID, o.IfName)
}

// parseOwner reads a per-IP file's content the way the reference matches it:
// trimmed, then split at the first CRLF.
func parseOwner(data []byte) owner {
	s := strings.TrimSpace(string(data))
	id, ifname, _ := strings.Cut(s, lineBreak)
	return owner{ID: id, IfName: ifname}
}

// store is one network's directory, locked for the lifetime of the value.
type store struct {
	dir    string
	idxDir string
	attDir string
	lock   *os.File
}

// openStore locks the network directory, creating it if create is set. It
// returns (nil, nil) when the directory does not exist and create is false.
func openStore(dir string, create bool) (*store, error) {
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, ioError("create data directory %s", dir, err)
		}
	} else if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return nil, ioError("open lock file in %s", dir, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, ioError("lock %s", f.Name(), err)
	}
	idx := filepath.Join(dir, indexDirName)
	return &store{dir: dir, idxDir: idx, attDir: filepath.Join(idx, attDirName), lock: f}, nil
}

// close releases the lock (closing the descriptor drops the flock).
func (s *store) close() {
	if s != nil {
		s.lock.Close()
	}
}

func (s *store) ipPath(a netip.Addr) string { return filepath.Join(s.dir, a.String()) }

// reserve creates the file for a, failing (false) when it already exists.
// The file appears with its content in one step (atomicfile.CreateExclusive),
// so a process killed at any point either owns a under o's name, which o's
// DEL releases, or holds nothing: never an empty, ownerless file that no
// DEL would release.
func (s *store) reserve(a netip.Addr, o owner) (bool, error) {
	ok, err := atomicfile.CreateExclusive(s.ipPath(a), []byte(strings.TrimSpace(o.ID)+lineBreak+o.IfName), 0o600)
	if err != nil {
		return false, ioError("reserve %s", a.String(), err)
	}
	return ok, nil
}

// ownerOf reads who holds a; ok is false when a is not allocated.
func (s *store) ownerOf(a netip.Addr) (owner, bool, error) {
	data, err := os.ReadFile(s.ipPath(a))
	if errors.Is(err, fs.ErrNotExist) {
		return owner{}, false, nil
	}
	if err != nil {
		return owner{}, false, ioError("read %s", s.ipPath(a), err)
	}
	return parseOwner(data), true, nil
}

func (s *store) release(a netip.Addr) error {
	if err := os.Remove(s.ipPath(a)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return ioError("release %s", a.String(), err)
	}
	return nil
}

func (s *store) lastReserved(set int) netip.Addr {
	data, err := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("%s%d", lastIPPrefix, set)))
	if err != nil {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(strings.TrimSpace(string(data)))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

func (s *store) setLastReserved(set int, a netip.Addr) error {
	p := filepath.Join(s.dir, fmt.Sprintf("%s%d", lastIPPrefix, set))
	if err := writeInPlace(p, []byte(a.String())); err != nil {
		return ioError("write %s", p, err)
	}
	return nil
}

// scan reads every per-IP file: the O(n) path used only to rebuild the
// index, for GC and for STATUS. A rebuild follows every interrupted change
// (see index.go), so this is also where leftovers of killed writes go.
func (s *store) scan(readOwners bool) (map[netip.Addr]owner, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, ioError("list %s", s.dir, err)
	}
	out := make(map[netip.Addr]owner, len(ents))
	for _, e := range ents {
		if atomicfile.IsTemp(e.Name()) {
			// Left by a killed reserve on a file system without O_TMPFILE;
			// the lock is ours, so no reserve is using it.
			os.Remove(filepath.Join(s.dir, e.Name()))
			continue
		}
		a, err := netip.ParseAddr(e.Name())
		if err != nil || a.Zone() != "" || a.Is4In6() || !e.Type().IsRegular() {
			continue
		}
		var o owner
		if readOwners {
			var ok bool
			if o, ok, err = s.ownerOf(a); err != nil {
				return nil, err
			} else if !ok {
				continue
			}
		}
		out[a] = o
	}
	return out, nil
}

// writeInPlace replaces a small file's content without truncating it to
// zero first: on ext4 a truncate-and-rewrite forces a flush on close
// (auto_da_alloc), which costs far more than the whole operation.
// Readers hold the lock, so they never see a half-written file.
func writeInPlace(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Truncate(int64(len(data)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func ioError(what, arg string, err error) error {
	return spec.Errorf(spec.ErrIOFailure, what+": %v", arg, err)
}
