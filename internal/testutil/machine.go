package testutil

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/rundir"
)

// NoSystemBus is the D-Bus system bus address tests give every process
// they start: a socket that does not exist, so that a firewall plugin left
// to pick its backend (ours, the reference's) never finds a firewalld of
// the machine's and never programs the machine's firewall. A test that
// needs firewalld starts its own bus and sets the variable itself.
const NoSystemBus = "unix:path=/nonexistent/patchbay-test-no-system-bus"

// MachineDirs are the machine's directories that CNI plugins and runtimes
// write by default. Tests must leave nothing new in them: /run's own
// entries (named network namespaces come and go under /run/netns, which
// NewNS cleans up) and everything below the others.
var MachineDirs = []struct {
	Path string
	Deep bool // every file below it, or only its own entries
}{{"/run", false}, {"/run/cni", true}, {"/var/lib/cni", true}, {"/etc/cni", true}, {"/opt/cni", true}}

// Main is a package's TestMain that runs its tests isolated from the
// machine (see Run): func TestMain(m *testing.M) { testutil.Main(m) }.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run runs m's tests isolated from the machine's run-time state (Isolate)
// and turns a failure of its final check (files the tests left in
// MachineDirs) into a failing exit code. For a TestMain with work of its
// own: os.Exit(testutil.Run(m)).
func Run(m *testing.M) int {
	done := Isolate()
	code := m.Run()
	if err := done(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Isolate points this process, and everything it starts, away from the
// machine's state: PATCHBAY_RUN_DIR (our locks and records,
// internal/rundir) at a fresh temporary directory (and removes those of
// test binaries that are gone without removing theirs) and
// DBUS_SYSTEM_BUS_ADDRESS at NoSystemBus. It lists MachineDirs; the
// returned func removes the temporary directory and reports what appeared
// in MachineDirs since and is still there a second later, unless another
// process holds a lock on it (another process's lock file of a verb in
// progress).
func Isolate() (done func() error) {
	removeStaleRunDirs()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", runDirPrefix, os.Getpid()))
	if err != nil {
		return func() error { return fmt.Errorf("testutil.Isolate: %v", err) }
	}
	os.Setenv(rundir.Env, dir)
	os.Setenv("DBUS_SYSTEM_BUS_ADDRESS", NoSystemBus)
	before := machineFiles()
	return func() error {
		os.RemoveAll(dir)
		if len(newFiles(before)) == 0 {
			return nil
		}
		time.Sleep(time.Second)
		left := newFiles(before)
		if len(left) == 0 {
			return nil
		}
		return fmt.Errorf("the tests left files in the machine's CNI directories (or another process made them meanwhile):\n\t%s", strings.Join(left, "\n\t"))
	}
}

// machineNetnsLock reports whether p is an attachment lock (skel's, in
// the default run directory) of a plugin run in the machine's own network
// namespace, where these tests never run one: another process's.
func machineNetnsLock(p string) bool {
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil || filepath.Dir(p) != filepath.Join(rundir.Default, "locks") {
		return false
	}
	ino := strings.TrimSuffix(strings.TrimPrefix(ns, "net:["), "]")
	return strings.HasPrefix(filepath.Base(p), ino+":")
}

// held reports whether another process holds a lock on the file at p: a
// lock file of a verb in progress (another process's: the tests' own are
// in their run directory), not a leftover.
func held(p string) bool {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == unix.EWOULDBLOCK
}

// runDirPrefix names Isolate's temporary run directories:
// <prefix><pid>-<random>.
const runDirPrefix = "patchbay-run-"

// removeStaleRunDirs removes the temporary run directories of test
// binaries that are gone without removing theirs (killed, or a TestMain
// that exits before done runs).
func removeStaleRunDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), runDirPrefix+"*-*"))
	for _, d := range dirs {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), runDirPrefix), "-")
		if n, err := strconv.Atoi(pid); err == nil && n > 0 && unix.Kill(n, 0) == unix.ESRCH {
			os.RemoveAll(d)
		}
	}
}

// machineFiles lists what MachineDirs hold.
func machineFiles() map[string]bool {
	out := map[string]bool{}
	// In the test VM (internal/vmtest sets PATCHBAY_VM=1 in the guest)
	// /run is the guest's own tmpfs, where its tools write (mount(8):
	// /run/mount); the CNI directories below it are still checked.
	inVM := os.Getenv("PATCHBAY_VM") == "1"
	for _, d := range MachineDirs {
		if !d.Deep && inVM {
			continue
		}
		if !d.Deep {
			ents, _ := os.ReadDir(d.Path)
			for _, e := range ents {
				out[filepath.Join(d.Path, e.Name())] = true
			}
			continue
		}
		filepath.WalkDir(d.Path, func(p string, e fs.DirEntry, err error) error {
			if err == nil && p != d.Path {
				out[p] = true
			}
			return nil
		})
	}
	return out
}

func newFiles(before map[string]bool) []string {
	var out []string
	for p := range machineFiles() {
		if !before[p] && !held(p) && !machineNetnsLock(p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
