// Package launch starts long-lived child processes (test servers, QEMU) so
// that they die with the process that started them, even when it is
// SIGKILLed and never runs a cleanup, and stops them by PID within a bound.
//
// Each child gets Pdeathsig SIGKILL. Pdeathsig fires when the forking
// *thread* exits, not the process, so children are forked from one OS thread
// that stays locked and never exits: forking from an arbitrary goroutine
// could kill a child whenever the Go runtime retires that thread (e.g. a
// netns test ending with its thread locked). Children also inherit the
// forking thread's network namespace: Start refuses unless that thread is in
// the process's own one.
package launch

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a child started by Start. We only ever signal it through its
// own os.Process (a pidfd where the kernel has them), never by name.
type Process struct {
	Cmd  *exec.Cmd
	done chan struct{} // closed once Wait returned
	err  error         // Wait's result, valid after done

	stopOnce sync.Once
	stopErr  error
}

// Start starts cmd (as cmd.Start does) with Pdeathsig SIGKILL, from the
// launcher thread, and waits for it in the background. Other SysProcAttr
// fields of cmd are kept.
func Start(cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	once.Do(func() {
		reqs = make(chan req)
		go launcher()
	})
	r := req{cmd: cmd, res: make(chan error)}
	reqs <- r
	if err := <-r.res; err != nil {
		return nil, err
	}
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended, and Wait's result if so.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop asks the process to end with ask (nil: SIGTERM), kills it by PID if
// it is still there after grace, and waits for its end (10 s more at most).
// Only the first call acts; every call returns its result. name labels
// errors.
func (p *Process) Stop(name string, grace time.Duration, ask func() error) error {
	p.stopOnce.Do(func() {
		if done, _ := p.Exited(); done {
			return
		}
		if ask == nil {
			ask = func() error { return p.Cmd.Process.Signal(syscall.SIGTERM) }
		}
		if err := ask(); err != nil {
			if done, _ := p.Exited(); done {
				return
			}
			p.stopErr = fmt.Errorf("%s (pid %d): asking it to stop: %v", name, p.Pid(), err)
		}
		select {
		case <-p.done:
		case <-time.After(grace):
			p.Cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				p.stopErr = fmt.Errorf("%s (pid %d) did not exit after SIGKILL", name, p.Pid())
			}
		}
	})
	return p.stopErr
}

// StartTime identifies a live process across pid reuse: its start time
// (field 22 of /proc/PID/stat), or "" when it is gone or a zombie.
func StartTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold anything
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return ""
	}
	return f[19]
}

var (
	once sync.Once
	reqs chan req
	// startNetns is the network namespace the process started in, read
	// by package init on the main thread before any test can move a
	// thread. (The main thread's namespace read later is not it: another
	// goroutine may be inside netns.Do on that thread at that moment.)
	startNetns, startNetnsErr = os.Readlink("/proc/thread-self/ns/net")
)

type req struct {
	cmd *exec.Cmd
	res chan error
}

func launcher() {
	runtime.LockOSThread() // never unlocked, on purpose
	for r := range reqs {
		if err := sameNetns(); err != nil {
			r.res <- err
			continue
		}
		r.res <- r.cmd.Start()
	}
}

// sameNetns checks that this thread is in the network namespace the
// process started in.
func sameNetns() error {
	mine, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	if startNetnsErr != nil {
		return startNetnsErr
	}
	if mine != startNetns {
		return fmt.Errorf("launcher thread is in network namespace %s, not the one the process started in, %s", mine, startNetns)
	}
	return nil
}
