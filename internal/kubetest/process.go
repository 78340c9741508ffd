package kubetest

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/patchbay-cni/patchbay/internal/launch"
)

// process is one server we started, with its log file.
type process struct {
	*launch.Process
	name string
	log  *os.File
}

// startProcess starts bin with args inside the cluster's network
// namespace, output to logPath. It dies with the test binary even when that
// never runs its cleanups (a -timeout panic, a crash, SIGKILL): no orphan
// servers (see launch.Start).
func (c *Cluster) startProcess(name, logPath, bin string, args ...string) (*process, error) {
	if c.ns == nil || c.ns.f == nil {
		return nil, fmt.Errorf("start %s: the cluster's network namespace is gone (stopped)", name)
	}
	// Appended to: a restarted process keeps the earlier lines.
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := c.ns.command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	lp, err := launch.Start(cmd)
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return &process{Process: lp, name: name, log: log}, nil
}

// stop sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (p *process) stop(grace time.Duration) error {
	err := p.Stop(p.name, grace, nil)
	p.log.Close()
	return err
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
