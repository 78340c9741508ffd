package kubetest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/patchbay-cni/patchbay/internal/launch"
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

// startProcess starts bin with args, output to logPath (see launch.Start).
func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Die with the test binary even when it never runs its cleanups (a
	// -timeout panic, a crash): no orphan servers.
	if err := launch.Start(cmd); err != nil {
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
