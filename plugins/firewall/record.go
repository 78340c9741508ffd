package firewall

import (
	"crypto/sha256"
	"encoding/hex"
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
// <dataDir>/<network>/<containerID>_<ifname>.json, written before the
// rules and removed after them, so that a crash anywhere leaves a record
// for DEL or GC to finish with. The reference layout's iptables rules and
// firewalld's zone sources carry no owner, so the records are how DEL
// without prevResult and GC find an attachment's addresses, bridge and
// backend, and how a DEL knows whether other attachments are still on its
// bridge (a backend chosen at ADD because firewalld ran stays the one DEL
// talks to). Everything read back is validated again before use.
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

// recordPath names an attachment's record; a name too long for the file
// system (the spec does not limit container IDs) is shortened with a hash.
func recordPath(dataDir, network, containerID, ifName string) string {
	name := containerID + "_" + ifName
	if len(name) > 200 {
		sum := sha256.Sum256([]byte(name))
		name = name[:100] + "-" + hex.EncodeToString(sum[:16])
	}
	return filepath.Join(dataDir, network, name+".json")
}

// readRecord returns the record at path, nil when there is none. A corrupt
// record (a crash cannot make one: it is written by rename) is treated as
// missing.
func readRecord(path string) (*record, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "firewall: read %s: %v", path, err)
	}
	rec := &record{}
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, nil
	}
	return rec, nil
}

func writeRecord(path string, rec *record) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return spec.Errorf(spec.ErrIOFailure, "firewall: create %s: %v", filepath.Dir(path), err)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, data, 0o600, false); err != nil {
		return spec.Errorf(spec.ErrIOFailure, "firewall: write %s: %v", path, err)
	}
	return nil
}

// removeRecord removes the record and its network directory once empty.
func removeRecord(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return spec.Errorf(spec.ErrIOFailure, "firewall: remove %s: %v", path, err)
	}
	os.Remove(filepath.Dir(path)) // fails while other records are there
	return nil
}

// networkRecords lists the records of a network by path.
func networkRecords(dataDir, network string) (map[string]*record, error) {
	dir := filepath.Join(dataDir, network)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "firewall: list %s: %v", dir, err)
	}
	out := map[string]*record{}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		rec, err := readRecord(p)
		if err != nil {
			return nil, err
		}
		if rec == nil {
			rec = &record{} // corrupt: still removed by GC
		}
		out[p] = rec
	}
	return out, nil
}

// claims are what the records of every network in a dataDir hold.
type claims struct {
	addrs   map[netip.Addr]bool
	bridges map[string]bool
}

// liveClaims reads every record in dataDir but those in except (the
// attachments being removed). An address another live attachment still has
// keeps its rules (the reference layout's rules are shared by address),
// and a bridge one of them is on keeps its isolation rules.
func liveClaims(dataDir string, except map[string]bool) (*claims, error) {
	out := &claims{addrs: map[netip.Addr]bool{}, bridges: map[string]bool{}}
	nets, err := os.ReadDir(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "firewall: list %s: %v", dataDir, err)
	}
	for _, n := range nets {
		if !n.IsDir() {
			continue
		}
		recs, err := networkRecords(dataDir, n.Name())
		if err != nil {
			return nil, err
		}
		for p, rec := range recs {
			if except[p] {
				continue
			}
			for _, a := range rec.IPs {
				out.addrs[a] = true
			}
			if rec.Bridge != "" {
				out.bridges[rec.Bridge] = true
			}
		}
	}
	return out, nil
}
