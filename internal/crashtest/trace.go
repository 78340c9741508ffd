//go:build linux && amd64

package crashtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Step is one state-changing system call of a traced command.
type Step struct {
	N       int    // 1-based, counted across every process and thread
	PID     int    // the thread that made it
	Comm    string // its executable's name (patchbay, bridge, ...)
	Syscall string
	Detail  string // the file or descriptor it acts on, when known
}

func (s Step) String() string {
	return fmt.Sprintf("step %d: %s[%d] %s %s", s.N, s.Comm, s.PID, s.Syscall, s.Detail)
}

// Outcome is what a traced run did.
type Outcome struct {
	Steps  int   // state-changing calls seen (up to the kill, if any)
	Killed *Step // the call before which a process was SIGKILLed; nil if none
	// Status is the root process's wait status.
	Status unix.WaitStatus
}

// stateSyscalls are the calls that change state outside the process, by
// name (amd64 numbers): file creation, writes, links, renames, removals,
// metadata, and netlink/nftables messages. Writes count only on files (not
// pipes, sockets or /dev), creation only with O_CREAT.
var stateSyscalls = map[uint64]string{
	unix.SYS_WRITE: "write", unix.SYS_PWRITE64: "pwrite64", unix.SYS_WRITEV: "writev", unix.SYS_PWRITEV: "pwritev", unix.SYS_PWRITEV2: "pwritev2",
	unix.SYS_SENDTO: "sendto", unix.SYS_SENDMSG: "sendmsg", unix.SYS_SENDMMSG: "sendmmsg",
	unix.SYS_OPEN: "open", unix.SYS_OPENAT: "openat", unix.SYS_CREAT: "creat",
	unix.SYS_MKDIR: "mkdir", unix.SYS_MKDIRAT: "mkdirat", unix.SYS_RMDIR: "rmdir",
	unix.SYS_UNLINK: "unlink", unix.SYS_UNLINKAT: "unlinkat",
	unix.SYS_RENAME: "rename", unix.SYS_RENAMEAT: "renameat", unix.SYS_RENAMEAT2: "renameat2",
	unix.SYS_LINK: "link", unix.SYS_LINKAT: "linkat", unix.SYS_SYMLINK: "symlink", unix.SYS_SYMLINKAT: "symlinkat",
	unix.SYS_TRUNCATE: "truncate", unix.SYS_FTRUNCATE: "ftruncate", unix.SYS_FCHMOD: "fchmod", unix.SYS_FCHMODAT: "fchmodat",
	unix.SYS_UTIMENSAT: "utimensat",
}

// syscallInfo is struct ptrace_syscall_info (PTRACE_GET_SYSCALL_INFO,
// Linux 5.3), the entry variant.
type syscallInfo struct {
	Op      uint8
	_       [3]uint8
	Arch    uint32
	IP, SP  uint64
	Nr      uint64
	Args    [6]uint64
	RetData uint32
	_       uint32
}

const (
	ptraceGetSyscallInfo = 0x420e
	syscallInfoEntry     = 1
)

func getSyscallInfo(tid int) (syscallInfo, error) {
	var si syscallInfo
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, ptraceGetSyscallInfo, uintptr(tid), unsafe.Sizeof(si), uintptr(unsafe.Pointer(&si)), 0, 0)
	if e != 0 {
		return si, e
	}
	return si, nil
}

// stateChanging decides whether the call at entry counts, and describes it.
func stateChanging(tid int, si syscallInfo) (name, detail string, ok bool) {
	name, ok = stateSyscalls[si.Nr]
	if !ok {
		return "", "", false
	}
	fdPath := func(fd uint64) string {
		p, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", tid, int32(fd)))
		return p
	}
	switch si.Nr {
	case unix.SYS_WRITE, unix.SYS_PWRITE64, unix.SYS_WRITEV, unix.SYS_PWRITEV, unix.SYS_PWRITEV2:
		p := fdPath(si.Args[0])
		if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "/dev/") {
			return "", "", false // pipes, sockets, event fds, /dev/null
		}
		return name, p, true
	case unix.SYS_OPEN:
		if si.Args[1]&unix.O_CREAT == 0 || si.Args[1]&unix.O_TMPFILE == unix.O_TMPFILE {
			return "", "", false
		}
		return name, readString(tid, si.Args[0]), true
	case unix.SYS_OPENAT:
		if si.Args[2]&unix.O_CREAT == 0 || si.Args[2]&unix.O_TMPFILE == unix.O_TMPFILE {
			return "", "", false // O_TMPFILE: unnamed until linked (counted then)
		}
		return name, readString(tid, si.Args[1]), true
	case unix.SYS_SENDTO, unix.SYS_SENDMSG, unix.SYS_SENDMMSG:
		return name, fdPath(si.Args[0]), true
	case unix.SYS_LINKAT, unix.SYS_RENAMEAT, unix.SYS_RENAMEAT2:
		return name, readString(tid, si.Args[1]) + " -> " + readString(tid, si.Args[3]), true
	case unix.SYS_MKDIRAT, unix.SYS_UNLINKAT, unix.SYS_FCHMODAT, unix.SYS_UTIMENSAT:
		return name, readString(tid, si.Args[1]), true
	case unix.SYS_FTRUNCATE, unix.SYS_FCHMOD:
		return name, fdPath(si.Args[0]), true
	}
	return name, readString(tid, si.Args[0]), true
}

// readString reads a NUL-terminated string (at most 512 bytes) from the
// tracee's memory, for step descriptions.
func readString(pid int, addr uint64) string {
	if addr == 0 {
		return ""
	}
	buf := make([]byte, 512)
	n, err := unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}, 0)
	if err != nil || n <= 0 {
		return ""
	}
	if i := strings.IndexByte(string(buf[:n]), 0); i >= 0 {
		return string(buf[:i])
	}
	return string(buf[:n])
}

func comm(pid int) string {
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
		// Our plugins are links to one binary: the name run as is argv[0].
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
			if arg0, _, _ := strings.Cut(string(b), "\x00"); arg0 != "" {
				return filepath.Base(arg0)
			}
		}
		return filepath.Base(exe)
	}
	return "?"
}

// RunKillingAt starts argv (with env and the given stdout/stderr files) in
// the calling goroutine's network namespace, traces it and every process
// and thread it starts, and SIGKILLs the process making the killAt-th
// state-changing call, before that call runs. killAt 0 kills nothing (to
// count the steps). limit bounds the whole run; at the limit every tracee
// is killed and an error returned.
func RunKillingAt(argv, env []string, stdout, stderr *os.File, killAt int, limit time.Duration) (Outcome, error) {
	var out Outcome
	// ptrace requests must come from the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	proc, err := os.StartProcess(argv[0], argv, &os.ProcAttr{Env: env,
		Files: []*os.File{nil, stdout, stderr}, Sys: &syscall.SysProcAttr{Ptrace: true, Setpgid: true}})
	if err != nil {
		return out, err
	}
	root := proc.Pid
	alive := map[int]bool{root: true}
	// Setpgid put every descendant in the root's process group.
	killAll := func() { unix.Kill(-root, unix.SIGKILL) }
	deadline := time.AfterFunc(limit, killAll)
	defer deadline.Stop()
	timedOut := func() bool { return !deadline.Stop() }

	var ws unix.WaitStatus
	if _, err := wait4(root, &ws); err != nil {
		return out, err
	}
	opts := unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK |
		unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_EXITKILL
	if err := unix.PtraceSetOptions(root, opts); err != nil {
		unix.Kill(root, unix.SIGKILL)
		return out, fmt.Errorf("ptrace options: %w", err)
	}
	unix.PtraceSyscall(root, 0)
	for len(alive) > 0 {
		// Only the root's process group: other goroutines of this process
		// fork too, possibly from this very thread before it was locked.
		tid, err := wait4(-root, &ws)
		if errors.Is(err, unix.ECHILD) {
			break
		}
		if err != nil {
			killAll()
			return out, err
		}
		switch {
		case ws.Exited() || ws.Signaled():
			delete(alive, tid)
			if tid == root {
				out.Status = ws
			}
			continue
		case !ws.Stopped():
			continue
		}
		alive[tid] = true // a new tracee may report before its creator's event
		sig := ws.StopSignal()
		switch {
		case sig == unix.SIGTRAP|0x80: // a system call stop
			si, err := getSyscallInfo(tid)
			if err == nil && si.Op == syscallInfoEntry {
				if name, detail, ok := stateChanging(tid, si); ok {
					out.Steps++
					if out.Steps == killAt {
						out.Killed = &Step{N: out.Steps, PID: tid, Comm: comm(tid), Syscall: name, Detail: detail}
						// kill(2) of a thread ID kills its whole process; a
						// fatal signal pending at entry skips the call.
						unix.Kill(tid, unix.SIGKILL)
					}
				}
			}
			unix.PtraceSyscall(tid, 0)
		case sig == unix.SIGTRAP && ws.TrapCause() > 0: // fork, clone, exec events
			if c := ws.TrapCause(); c == unix.PTRACE_EVENT_FORK || c == unix.PTRACE_EVENT_VFORK || c == unix.PTRACE_EVENT_CLONE {
				if msg, err := unix.PtraceGetEventMsg(tid); err == nil {
					alive[int(msg)] = true
				}
			}
			unix.PtraceSyscall(tid, 0)
		case sig == unix.SIGSTOP || sig == unix.SIGTRAP:
			// A new tracee's first stop (or the exec trap): not a signal
			// for the program.
			unix.PtraceSyscall(tid, 0)
		default:
			unix.PtraceSyscall(tid, int(sig)) // deliver it
		}
	}
	if timedOut() {
		return out, fmt.Errorf("%s did not finish within %v (killed)", argv[0], limit)
	}
	return out, nil
}

// wait4 waits for the calling thread's own children and tracees only
// (__WNOTHREAD): other tracers, and os/exec's waits, run in this process too.
func wait4(pid int, ws *unix.WaitStatus) (int, error) {
	for {
		wpid, err := unix.Wait4(pid, ws, unix.WALL|unix.WNOTHREAD, nil)
		if err != unix.EINTR {
			return wpid, err
		}
	}
}
