package kubetest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// process is one child we started; we only ever signal it through its own
// os.Process (a pidfd where the kernel has them), never by name.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed once Wait returned
	err  error         // Wait's result, valid after done

	stopOnce sync.Once
	stopErr  error
}

// startProcess starts bin with args, output to logPath, from the launcher
// thread (see launch).
func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	// Appended to: a restarted process keeps the earlier lines.
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Die with the test binary even when it never runs its cleanups (a
	// -timeout panic, a crash): no orphan servers.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := launch(cmd); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended (and how).
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (p *process) stop(grace time.Duration) error {
	p.stopOnce.Do(func() {
		defer p.log.Close()
		if done, _ := p.exited(); done {
			return
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			if done, _ := p.exited(); done {
				return
			}
			p.stopErr = fmt.Errorf("%s (pid %d): SIGTERM: %v", p.name, p.pid(), err)
		}
		select {
		case <-p.done:
		case <-time.After(grace):
			p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				p.stopErr = fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.pid())
			}
		}
	})
	return p.stopErr
}

// The launcher starts every child from one OS thread that stays locked and
// never exits. Pdeathsig fires when the forking *thread* exits, so forking
// from an arbitrary goroutine could kill our servers whenever the runtime
// retires that thread (e.g. a netns test ending with its thread locked).
// Children also inherit the forking thread's network namespace: the launcher
// refuses to start anything unless its thread is in the process's own one.
var (
	launchOnce sync.Once
	launchReqs chan launchReq
)

type launchReq struct {
	cmd *exec.Cmd
	res chan error
}

func launch(cmd *exec.Cmd) error {
	launchOnce.Do(func() {
		launchReqs = make(chan launchReq)
		go launcher()
	})
	r := launchReq{cmd: cmd, res: make(chan error)}
	launchReqs <- r
	return <-r.res
}

func launcher() {
	runtime.LockOSThread() // never unlocked, on purpose
	for r := range launchReqs {
		if err := sameNetns(); err != nil {
			r.res <- err
			continue
		}
		r.res <- r.cmd.Start()
	}
}

// sameNetns checks that this thread is in the network namespace of the
// process's main thread.
func sameNetns() error {
	mine, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	main, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return err
	}
	if mine != main {
		return fmt.Errorf("launcher thread is in network namespace %s, not the process's %s", mine, main)
	}
	return nil
}

// tailFile returns the last n lines of a file (or why it cannot).
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
