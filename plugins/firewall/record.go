package firewall

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// A record says what an ADD did for one attachment:
// <dataDir>/<network>/<containerID>:<ifname>.json (atomicfile.BoundedName:
// ':' is refused in both, so the name is unambiguous; "_<hash>.json" when
// too long), written before the rules and removed after them, so that a
// crash anywhere leaves a record for DEL or GC to finish with. The
// reference layout's iptables rules and firewalld's zone sources carry no
// owner, so the records are how DEL without prevResult and GC find an
// attachment's addresses, bridge and backend, and how a DEL knows whether
// other attachments still need an address's rules or a bridge's isolation
// (a backend chosen at ADD because firewalld ran stays the one DEL talks
// to). Everything read back is validated again before use.
//
// dataDir is configuration, so the plugin touches nothing there it did not
// make: a file counts as a record only if it decodes to a container ID and
// interface name that name exactly that file (any other file, a CNI config
// or an operator's, is never read as one, changed or removed), and a
// network directory is removed only if it carries the marker the plugin
// puts in the directories it creates and nothing else is left in it.
type record struct {
	ContainerID string       `json:"containerID"`
	IfName      string       `json:"ifname"`
	Backend     string       `json:"backend"`
	AdminChain  string       `json:"adminChain,omitempty"`
	Zone        string       `json:"zone,omitempty"`
	Policy      string       `json:"ingressPolicy,omitempty"`
	Bridge      string       `json:"bridge,omitempty"`
	IPs         []netip.Addr `json:"ips"`
}

// marker is in every network directory the plugin made, and only there.
const marker = ".patchbay-firewall"

func recordName(containerID, ifName string) string {
	return atomicfile.BoundedName(containerID+":"+ifName, ".json", containerID, ifName)
}

// recordPath names an attachment's record.
func recordPath(dataDir, network, containerID, ifName string) string {
	return filepath.Join(dataDir, network, recordName(containerID, ifName))
}

// isRecordName reports whether a directory entry may be a record: the
// shape recordName gives (its content decides, see readRecord).
func isRecordName(name string) bool {
	base, ok := strings.CutSuffix(name, ".json")
	if !ok {
		return false
	}
	if h, ok := strings.CutPrefix(base, "_"); ok {
		return len(h) == 64 && strings.Trim(h, "0123456789abcdef") == ""
	}
	id, ifName, ok := strings.Cut(base, ":")
	return ok && spec.ValidateContainerID(id) == nil && spec.ValidateInterfaceName(ifName) == nil
}

// readRecord returns the record at path, nil when there is none there: no
// file, or a file that is not a record of this plugin (see record).
func readRecord(path string) (*record, error) { return readRecordAs(path, filepath.Base(path)) }

// readRecordAs reads the file at path as the record named name (its
// temporary's content names the record it is for).
func readRecordAs(path, name string) (*record, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "read %s: %v", path, err)
	}
	rec := &record{}
	if json.Unmarshal(data, rec) != nil || spec.ValidateContainerID(rec.ContainerID) != nil ||
		spec.ValidateInterfaceName(rec.IfName) != nil || name != recordName(rec.ContainerID, rec.IfName) {
		return nil, nil
	}
	return rec, nil
}

func writeRecord(path string, rec *record) error {
	if err := makeNetworkDir(filepath.Dir(path)); err != nil {
		return spec.Errorf(spec.ErrIOFailure, "create %s: %v", filepath.Dir(path), err)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, data, 0o600, false); err != nil {
		return spec.Errorf(spec.ErrIOFailure, "write %s: %v", path, err)
	}
	return nil
}

// makeNetworkDir makes a network's directory, with the marker, in one step
// (a directory made under a temporary name, then renamed), so that no
// crash leaves a directory of ours without it. A directory that exists
// without the marker is used but never removed.
func makeNetworkDir(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return errors.New("not a directory")
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	tmp := pendingDir(dir)
	dropPendingDir(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, marker), nil, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// pendingDir is the temporary name of a network directory being made or
// removed.
func pendingDir(dir string) string {
	return filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".new")
}

// dropPendingDir removes what a killed makeNetworkDir or dropNetworkDir
// left: the temporary directory, empty (killed before the marker was made)
// or holding the marker only.
func dropPendingDir(tmp string) {
	os.Remove(filepath.Join(tmp, marker))
	os.Remove(tmp) // fails unless empty
}

// removeRecord removes an attachment's record (rec is what readRecord found
// at path: nil leaves a file that is not a record of ours alone) and the
// temporary of a write a crash interrupted (if it holds this record), then
// its network directory if the plugin made it and nothing else is in it.
func removeRecord(path string, rec *record) error {
	if rec != nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return spec.Errorf(spec.ErrIOFailure, "remove %s: %v", path, err)
		}
	}
	tmp := atomicfile.TempPath(path)
	if trec, err := readRecordAs(tmp, filepath.Base(path)); err == nil && trec != nil {
		if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return spec.Errorf(spec.ErrIOFailure, "remove %s: %v", tmp, err)
		}
	}
	dropNetworkDir(filepath.Dir(path))
	return nil
}

// dropNetworkDir removes a network directory that holds only the marker:
// renamed to the temporary name first (one step: a kill leaves either the
// marked directory or the temporary, which dropPendingDir removes), never
// a directory without the marker that is no longer known to be ours.
func dropNetworkDir(dir string) {
	tmp := pendingDir(dir)
	dropPendingDir(tmp)
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 || ents[0].Name() != marker {
		return
	}
	if os.Rename(dir, tmp) == nil {
		dropPendingDir(tmp)
	}
}

// networkRecords lists the records of a network by path, and the
// temporaries of interrupted writes of records (their targets' paths).
func networkRecords(dataDir, network string) (recs map[string]*record, temps []string, err error) {
	dir := filepath.Join(dataDir, network)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, spec.Errorf(spec.ErrIOFailure, "list %s: %v", dir, err)
	}
	recs = map[string]*record{}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		if atomicfile.IsTemp(name) {
			// Ours if it holds the record its name is the temporary of.
			target := filepath.Join(dir, strings.TrimSuffix(strings.TrimPrefix(name, "."), ".tmp"))
			if isRecordName(filepath.Base(target)) && atomicfile.TempPath(target) == filepath.Join(dir, name) {
				if rec, err := readRecordAs(filepath.Join(dir, name), filepath.Base(target)); err == nil && rec != nil {
					temps = append(temps, target)
				}
			}
			continue
		}
		if !isRecordName(name) {
			continue
		}
		p := filepath.Join(dir, name)
		rec, err := readRecord(p)
		if err != nil {
			return nil, nil, err
		}
		if rec != nil {
			recs[p] = rec
		}
	}
	return recs, temps, nil
}

// claims are what the records of the plugin's networks in a dataDir hold.
type claims struct {
	addrs   map[netip.Addr]bool
	bridges map[string]bool
}

// liveClaims reads the records of every network directory the plugin made
// in dataDir (those with the marker; nothing else is read), but those in
// except (the attachments being removed). An address another live
// attachment still has, in any network, keeps its rules (the reference
// layout's rules are shared by address, and networks may overlap), and a
// bridge one of them is on keeps its isolation rules.
func liveClaims(dataDir string, except map[string]bool) (*claims, error) {
	out := &claims{addrs: map[netip.Addr]bool{}, bridges: map[string]bool{}}
	nets, err := os.ReadDir(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "list %s: %v", dataDir, err)
	}
	for _, n := range nets {
		if !n.IsDir() || spec.ValidateNetworkName(n.Name()) != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(dataDir, n.Name(), marker)); err != nil {
			continue
		}
		recs, _, err := networkRecords(dataDir, n.Name())
		if err != nil {
			return nil, err
		}
		for p, rec := range recs {
			if except[p] {
				continue
			}
			for _, a := range rec.IPs {
				out.addrs[a.Unmap()] = true
			}
			if rec.Bridge != "" {
				out.bridges[rec.Bridge] = true
			}
		}
	}
	return out, nil
}
