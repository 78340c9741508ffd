// Command vmrun runs one command inside the test VM (internal/vmtest), with
// this directory and environment, streams its output back and exits with its
// status. It also works as a `go test -exec` wrapper, which runs a whole test
// binary in the VM, and gives an interactive shell in the VM:
//
//	go run ./internal/vmtest/vmrun ip -d link add d0 type dummy
//	go test -exec "$PWD/bin/vmrun" ./plugins/ipvlan/
//	go run ./internal/vmtest/vmrun -shell
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

func main() {
	vmtest.AgentMain() // inside the VM this binary is the agent
	shell := flag.Bool("shell", false, "boot into an interactive shell on the VM's console (exit or Ctrl-D powers off; Ctrl-A X quits QEMU)")
	keep := flag.Bool("keep", false, "keep the VM's directory (console.log, qemu.log) and print where it is")
	console := flag.Bool("console", false, "copy the kernel console to stderr")
	cpus := flag.Int("cpus", 2, "virtual CPUs (one host thread each)")
	mem := flag.Int("memory", 1024, "memory in MiB")
	nics := flag.Int("nics", 0, "virtio network cards, wired to each other only (eth0, eth1, ... in the VM)")
	timeout := flag.Duration("timeout", 30*time.Minute, "kill the command (and the VM) after this long")
	verbose := flag.Bool("v", false, "print the boot time and the command's exit status to stderr")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: vmrun [flags] command [args...]\n       vmrun -shell\nRuns command inside the test VM with this directory and environment; exits with its status.\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *shell == (flag.NArg() > 0) {
		flag.Usage()
		os.Exit(2)
	}
	opts := vmtest.Options{Shell: *shell, Keep: *keep, CPUs: *cpus, MemoryMiB: *mem, NICs: *nics}
	if *console {
		opts.Console = os.Stderr
	}
	os.Exit(run(opts, flag.Args(), *timeout, *verbose))
}

func run(opts vmtest.Options, args []string, timeout time.Duration, verbose bool) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := vmtest.Start(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: %v\n", err)
		return 125
	}
	defer func() {
		if err := m.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "vmrun: %v\n", err)
		}
		if opts.Keep {
			fmt.Fprintf(os.Stderr, "vmrun: VM directory kept: %s\n", m.Dir())
		}
	}()
	if opts.Shell {
		if err := m.Wait(); err != nil {
			fmt.Fprintf(os.Stderr, "vmrun: QEMU: %v\n", err)
			return 1
		}
		return 0
	}
	if verbose {
		fmt.Fprintf(os.Stderr, "vmrun: VM booted in %v (guest uptime %v; kernel %s, QEMU pid %d)\n",
			m.Boot.Round(time.Millisecond), m.GuestUptime, m.Release, m.PID())
	}
	t0 := time.Now()
	code, err := m.Exec(ctx, vmtest.Command{Args: args, Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: %v\n", err)
		return 125
	}
	if verbose {
		fmt.Fprintf(os.Stderr, "vmrun: exit status %d after %v\n", code, time.Since(t0).Round(time.Millisecond))
	}
	if code < 0 {
		return 128 + int(syscall.SIGKILL)
	}
	return code
}
