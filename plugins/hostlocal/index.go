package hostlocal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/spec"
)

// The index lives in <network dir>/.patchbay-index and maps each attachment
// to its addresses, one small file per attachment, so ADD and DEL touch a
// constant number of files instead of reading every per-IP file as the
// reference does:
//
//	.patchbay-index/state                 the format's name
//	.patchbay-index/by-attachment/<hash>  {"containerID","ifname","ips"}
//
// Trust rule: after each change we stamp the network directory, the
// attachment directory and the state file with one made-up mtime (a second
// in the past). Any later create or remove of a per-IP file by anyone else
// (the reference plugin, an admin) sets the network directory's mtime to the
// current time, which cannot equal the stamp; so does adding or deleting
// index files, or rewriting state. Different mtimes, a missing or unknown
// state, or an attachment file that does not parse or disagrees with the
// per-IP files make us rebuild the index from the per-IP files first.
const (
	indexDirName = ".patchbay-index"
	attDirName   = "by-attachment"
	stateName    = "state"
	stateMagic   = "patchbay-host-local-index-v1"
)

// errStale reports an index that disagrees with the per-IP files.
var errStale = errors.New("host-local index is stale")

type attEntry struct {
	ContainerID string       `json:"containerID"`
	IfName      string       `json:"ifname"`
	IPs         []netip.Addr `json:"ips"`
}

func (s *store) attPath(o owner) string {
	h := sha256.Sum256([]byte(o.ID + "\x00" + o.IfName))
	return filepath.Join(s.attDir, hex.EncodeToString(h[:]))
}

// withIndex runs fn with a trusted index; if fn finds it stale (before
// changing anything), the index is rebuilt and fn runs once more.
func (s *store) withIndex(fn func() error) error {
	if !s.indexValid() {
		if err := s.rebuild(nil); err != nil {
			return err
		}
	}
	err := fn()
	if !errors.Is(err, errStale) {
		return err
	}
	if err := s.rebuild(nil); err != nil {
		return err
	}
	if err = fn(); errors.Is(err, errStale) {
		return spec.Errorf(spec.ErrInternal, "index of %s still inconsistent after a rebuild", s.dir)
	}
	return err
}

func mtimeNs(path string) (int64, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, false
	}
	return st.Mtim.Nano(), true
}

func (s *store) indexValid() bool {
	state := filepath.Join(s.idxDir, stateName)
	data, err := os.ReadFile(state)
	if err != nil || string(data) != stateMagic+"\n" {
		return false
	}
	st, ok1 := mtimeNs(state)
	d, ok2 := mtimeNs(s.dir)
	a, ok3 := mtimeNs(s.attDir)
	return ok1 && ok2 && ok3 && st == d && st == a
}

// seal records that the index matches the per-IP files as of now. If the
// stamp cannot be set the state is removed instead, so the next operation
// rebuilds: slower, never wrong.
func (s *store) seal() {
	ts := unix.NsecToTimespec(time.Now().Add(-time.Second).UnixNano())
	times := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, ts}
	state := filepath.Join(s.idxDir, stateName)
	for _, p := range []string{state, s.attDir, s.dir} {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, times, 0); err != nil {
			os.Remove(state)
			return
		}
	}
}

// rebuild recreates the index from the per-IP files (all, when already
// scanned, else read now) and seals it.
func (s *store) rebuild(all map[netip.Addr]owner) error {
	if all == nil {
		var err error
		if all, err = s.scan(true); err != nil {
			return err
		}
	}
	byOwner := map[owner][]netip.Addr{}
	for a, o := range all {
		byOwner[o] = append(byOwner[o], a)
	}
	if err := os.RemoveAll(s.idxDir); err != nil {
		return ioError("remove index %s", s.idxDir, err)
	}
	if err := os.MkdirAll(s.attDir, 0o700); err != nil {
		return ioError("create index %s", s.attDir, err)
	}
	for o, ips := range byOwner {
		if err := s.putAtt(o, ips); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(s.idxDir, stateName), []byte(stateMagic+"\n"), 0o600); err != nil {
		return ioError("write index state in %s", s.idxDir, err)
	}
	s.seal()
	return nil
}

// getAtt returns the addresses the index holds for o.
func (s *store) getAtt(o owner) ([]netip.Addr, error) {
	data, err := os.ReadFile(s.attPath(o))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, ioError("read index %s", s.attPath(o), err)
	}
	var e attEntry
	if json.Unmarshal(data, &e) != nil || e.ContainerID != o.ID || e.IfName != o.IfName {
		return nil, errStale
	}
	return e.IPs, nil
}

// putAtt records o's addresses (none: removes the entry).
func (s *store) putAtt(o owner, ips []netip.Addr) error {
	p := s.attPath(o)
	if len(ips) == 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return ioError("remove index entry %s", p, err)
		}
		return nil
	}
	ips = slices.Clone(ips)
	slices.SortFunc(ips, netip.Addr.Compare)
	data, _ := json.Marshal(attEntry{ContainerID: o.ID, IfName: o.IfName, IPs: slices.Compact(ips)})
	if err := writeInPlace(p, data); err != nil {
		return ioError("write index entry %s", p, err)
	}
	return nil
}

// verifiedAtt returns o's addresses after checking each against its per-IP
// file: a file owned by someone else means the index is stale; a missing
// file is dropped (it was released behind our back, which a stamp mismatch
// normally catches first).
// known reports whether the index has an entry for o at all.
func (s *store) verifiedAtt(o owner) (ips []netip.Addr, known bool, err error) {
	listed, err := s.getAtt(o)
	if err != nil {
		return nil, false, err
	}
	for _, a := range listed {
		got, ok, err := s.ownerOf(a)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			continue
		}
		if got != o {
			return nil, false, errStale
		}
		ips = append(ips, a)
	}
	return ips, listed != nil, nil
}
