// Package launch starts long-lived child processes (test servers, QEMU) so
// that they die with the process that started them, even when it is
// SIGKILLed and never runs a cleanup.
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
	"sync"
	"syscall"
)

var (
	once sync.Once
	reqs chan req
)

type req struct {
	cmd *exec.Cmd
	res chan error
}

// Start starts cmd (as cmd.Start does) with Pdeathsig SIGKILL, from the
// launcher thread. Other SysProcAttr fields of cmd are kept.
func Start(cmd *exec.Cmd) error {
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
	return <-r.res
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
