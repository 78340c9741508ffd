package skel

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/internal/lockfile"
	"github.com/patchbay-cni/patchbay/internal/rundir"
	"github.com/patchbay-cni/patchbay/spec"
)

// LockDir holds the per-attachment locks (see the package doc); a lock's
// file exists only while its verb runs. "" (the default) means LockDirPath's
// <run dir>/locks: /run/cni/patchbay/locks, unless PATCHBAY_RUN_DIR moves
// the run directory (internal/rundir). A variable so tests can move it.
var LockDir = ""

// LockDirPath is the directory the attachment locks are in.
func LockDirPath() string {
	if LockDir != "" {
		return LockDir
	}
	return rundir.Path("locks")
}

// lockEnv names the lock a plugin holds for its delegates: they run under
// it, in-process or exec'd, and must not wait for it.
const lockEnv = "PATCHBAY_ATTACHMENT_LOCK"

// lockPath is <LockDir>/<host netns>:<network>:<containerID>:<ifname>.lock
// (':' is in none of them, so the name is unambiguous), bounded for long
// IDs. The attachment is (containerID, ifname) of one network on one node;
// the node is the host network namespace the plugin runs in, which keeps
// test "hosts" (namespaces on one machine) apart.
func lockPath(network, containerID, ifName string) string {
	ns := "-"
	if l, err := os.Readlink("/proc/thread-self/ns/net"); err == nil {
		ns = strings.TrimSuffix(strings.TrimPrefix(l, "net:["), "]")
	}
	name := ns + ":" + network + ":" + containerID + ":" + ifName
	return filepath.Join(LockDirPath(), atomicfile.BoundedName(name, ".lock", ns, network, containerID, ifName))
}

// lockAttachment takes the attachment's lock for an ADD, CHECK or DEL and
// returns its release. A DEL that cannot take it (LockDir not writable)
// goes on without: a DEL that cannot run blocks the container's removal.
func lockAttachment(a *CmdArgs) (release func(), err error) {
	switch a.Command {
	case spec.CmdAdd, spec.CmdCheck, spec.CmdDel:
	default:
		return func() {}, nil
	}
	path := lockPath(a.Conf.Name, a.ContainerID, a.IfName)
	if a.Env[lockEnv] == path {
		return func() {}, nil // our caller holds it
	}
	fail := func(err error) (func(), error) {
		if a.Command == spec.CmdDel && a.Ctx.Err() == nil {
			a.Log.Warn("DEL continues without the attachment lock", "error", err)
			return func() {}, nil
		}
		return nil, spec.Errorf(spec.ErrIOFailure, "cannot lock container %q interface %q: %v", a.ContainerID, a.IfName, err)
	}
	l, err := lockfile.TryLock(path)
	if l == nil && err == nil {
		// The holder records "VERB PID" just after locking: in that
		// instant the file may still say what a killed holder wrote, so a
		// dead PID does not count.
		verb, pid, _ := strings.Cut(lockfile.Info(path), " ")
		if n, err := strconv.Atoi(pid); a.Command == spec.CmdAdd && verb == spec.CmdAdd && err == nil && unix.Kill(n, 0) == nil {
			return nil, spec.Errorf(spec.ErrTryAgainLater, "another ADD of container %q interface %q is in progress (process %s): a runtime must not run two ADDs of one attachment at once", a.ContainerID, a.IfName, pid)
		}
		l, err = lockfile.Acquire(a.Ctx, path)
	}
	if err != nil {
		return fail(err)
	}
	if err := l.SetInfo(a.Command + " " + strconv.Itoa(os.Getpid())); err != nil {
		a.Log.Warn("cannot record the lock holder", "error", err)
	}
	a.Env = a.Env.With(lockEnv, path)
	return func() { l.Unlock(true) }, nil
}
