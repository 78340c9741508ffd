package hostdevice

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// saved is a device's state before ADD moved it, written before anything
// changes and removed when DEL (or GC) has put the device back: a crash
// at any point leaves a record DEL can finish from. The link alias carries
// the original name too, as in the reference, so either plugin's DEL puts
// back a device the other moved.
type saved struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Netns       string `json:"netns"`
	// Name is the device's name in the host namespace.
	Name string `json:"name"`
	// Alias is the alias it had (ours replaces it with Name meanwhile).
	Alias string `json:"alias,omitempty"`
	MAC   string `json:"mac,omitempty"`
	// PermMAC is the NIC's permanent address (none for virtual links): it
	// identifies the device when the kernel brought it back to the host
	// under another name.
	PermMAC string `json:"permMac,omitempty"`
	MTU     int    `json:"mtu,omitempty"`
	Up      bool   `json:"up"`
	// Master is the bridge (or bond...) it was a port of: leaving the
	// namespace took it out.
	Master string `json:"master,omitempty"`
}

// statePath is <dataDir>/<network>/<containerID>_<ifname>.json, or
// atomicfile.BoundedName's hashed name when that is too long for a file
// name (a container ID may be longer than 255 bytes; GC reads the IDs from
// the record, not the name). All parts are validated by the SDK (no
// separators, no dot names).
func statePath(dataDir, network, containerID, ifName string) string {
	return filepath.Join(dataDir, network, atomicfile.BoundedName(containerID+"_"+ifName, ".json", containerID, ifName))
}

// readState returns the record at path, or nil when there is none. A
// corrupt record (a crash can only leave a whole one or none, but a disk
// can do worse) counts as none: DEL falls back to the link alias.
func readState(path string) (*saved, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "read %s: %v", path, err)
	}
	s := &saved{}
	if err := json.Unmarshal(data, s); err != nil || s.Name == "" {
		return nil, nil
	}
	return s, nil
}

func writeState(path string, s *saved) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return spec.Errorf(spec.ErrIOFailure, "create %s: %v", filepath.Dir(path), err)
	}
	data, _ := json.Marshal(s)
	if err := atomicfile.Write(path, data, 0o600, false); err != nil {
		return spec.Errorf(spec.ErrIOFailure, "save the device's state to %s: %v", path, err)
	}
	return nil
}

// removeState removes the record and the temporary of its write, which an
// ADD killed before the rename leaves (then there is no record).
func removeState(path string) error {
	if err := atomicfile.Remove(path); err != nil {
		return spec.Errorf(spec.ErrIOFailure, "remove %s: %v", path, err)
	}
	return nil
}

// listStates returns the record files of a network (GC).
func listStates(dataDir, network string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(dataDir, network))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "list %s: %v", filepath.Join(dataDir, network), err)
	}
	var out []string
	for _, e := range entries {
		// Skip atomicfile's temporaries (".<name>.tmp-*").
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".json") && !strings.HasPrefix(n, ".") {
			out = append(out, filepath.Join(dataDir, network, n))
		}
	}
	return out, nil
}
