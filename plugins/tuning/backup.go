package tuning

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// saved holds the values an ADD replaced, restored by DEL. The file is the
// reference's: <dataDir>/<containerID>_<ifname>.json with these keys, so a
// node switching plugins restores either one's changes (a name too long for
// a path component gets atomicfile.BoundedName's instead). SysCtl is our
// addition (the reference does not restore sysctls); the reference ignores
// it.
type saved struct {
	Mac      string `json:"mac,omitempty"`
	Promisc  *bool  `json:"promisc,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
	Allmulti *bool  `json:"allmulti,omitempty"`
	TxQLen   *int   `json:"txQLen,omitempty"`
	// SysCtl maps a key's path under /proc/sys (slash separated, e.g.
	// net/ipv4/conf/eth0/arp_notify) to its previous value.
	SysCtl map[string]string `json:"sysctl,omitempty"`
}

func backupPath(dataDir, containerID, ifName string) string {
	return filepath.Join(dataDir, atomicfile.BoundedName(containerID+"_"+ifName, ".json", containerID, ifName))
}

// readSaved returns the saved values; found is false when there is no file.
func readSaved(path string) (s *saved, found bool, err error) {
	if strings.ContainsRune(path, 0) {
		return &saved{}, false, nil // a dataDir ADD refuses: nothing was saved
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &saved{}, false, nil
	}
	if err != nil {
		return nil, false, spec.Errorf(spec.ErrIOFailure, "read saved values %s: %v", path, err)
	}
	s = &saved{}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, true, spec.Errorf(spec.ErrDecodingFailure, "saved values %s are corrupt: %v", path, err)
	}
	return s, true, nil
}

// writeSaved replaces the file atomically (atomicfile.Write), so a crash
// never leaves half a record for DEL to trip over, and at most a temporary
// that removeSaved deletes.
func writeSaved(path string, s *saved) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return spec.Errorf(spec.ErrIOFailure, "create dataDir %s: %v", dir, err)
	}
	data, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return fmt.Errorf("encode saved values: %w", err)
	}
	if werr := atomicfile.Write(path, data, 0o600, false); werr != nil {
		return spec.Errorf(spec.ErrIOFailure, "save previous values to %s: %v", path, werr)
	}
	return nil
}

// removeSaved deletes the file and the temporary a killed writeSaved may
// have left; missing ones are fine.
func removeSaved(path string) error {
	if strings.ContainsRune(path, 0) {
		return nil // see readSaved
	}
	if err := atomicfile.Remove(path); err != nil {
		return spec.Errorf(spec.ErrIOFailure, "remove saved values: %v", err)
	}
	return nil
}
