// Command multinet is the CNI delegating plugin of the multi-net spec v1.3
// (see multinet/README.md). Run by a CRI runtime it is a CNI plugin;
// "multinet install" installs it on a node (binaries, credentials and its
// configuration, once the cluster network is ready) and "multinet
// uninstall" removes it (see multinet/plugin/install_cmd.go); "multinet
// daemon -config FILE" runs thick mode's daemon (the multinet-daemon
// binary beside this one, exec'd: linking it here would slow every
// thin-plugin call by its libraries' initialisation). It is a separate
// binary from the plugins' multi-call binary so that neither pays for the
// other's dependencies.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"

	"github.com/patchbay-cni/patchbay/multinet/plugin"
	"github.com/patchbay-cni/patchbay/skel"
)

func main() {
	// One short-lived invocation allocates a few MB at most: garbage
	// collection would only cost CPU the delegates need.
	debug.SetGCPercent(-1)
	if len(os.Args) > 1 && os.Args[1] == "install" {
		os.Exit(plugin.InstallCommand(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "uninstall" {
		os.Exit(plugin.UninstallCommand(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "daemon" {
		os.Exit(execDaemon())
	}
	if len(os.Args) > 1 && os.Args[1] == "write-status" { // started by ADD with asyncNetworkStatus
		os.Exit(plugin.WriteStatusMain(os.Stdin))
	}
	skel.Main(plugin.Plugin())
}

// execDaemon replaces this process by multinet-daemon from the same
// directory, with the same arguments.
func execDaemon() int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "multinet daemon:", err)
		return 1
	}
	bin := filepath.Join(filepath.Dir(self), "multinet-daemon")
	err = syscall.Exec(bin, append([]string{bin}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "multinet daemon: cannot run %s (it is installed beside multinet): %v\n", bin, err)
	return 1
}
