// Package rundir names the one directory where patchbay keeps its run-time
// files on a node: the per-attachment locks (skel), the firewall layer's
// locks, the firewall plugin's records. Everything of ours below /run is
// under it, so one environment variable moves all of it: tests and the
// bench point PATCHBAY_RUN_DIR at a temporary directory (exec'd plugins
// inherit it), and nothing they run touches the machine's /run.
//
// Files whose place other tools share (tuning's /run/cni/tuning, the dhcp
// daemon's socket, host-local's /var/lib/cni/networks) keep the reference
// plugins' paths and are not under it: their tests pass their own paths.
package rundir

import (
	"os"
	"path/filepath"
	"sync"
)

// Default is the run directory when Env is not set.
const Default = "/run/cni/patchbay"

// Env names the environment variable that moves the run directory.
const Env = "PATCHBAY_RUN_DIR"

// Dir is the run directory: Env's value (made absolute) if set, else
// Default. It is read once, on first use (not at package init, so that a
// TestMain or a bench can set it before anything needs it).
var Dir = sync.OnceValue(func() string {
	d := os.Getenv(Env)
	if d == "" {
		return Default
	}
	if abs, err := filepath.Abs(d); err == nil {
		return abs
	}
	return filepath.Clean(d)
})

// Path is a path below the run directory.
func Path(elem ...string) string {
	return filepath.Join(append([]string{Dir()}, elem...)...)
}
