// Command multinet is the CNI delegating plugin of the multi-net spec v1.3
// (see multinet/README.md). Run by a CRI runtime it is a CNI plugin; run as
// "multinet install -config FILE -dest DIR [-timeout D]" it writes its
// configuration into the runtime's CNI directory once the cluster network
// is ready; "multinet daemon -config FILE" runs thick mode's daemon (the
// multinet-daemon binary beside this one, exec'd: linking it here would
// slow every thin-plugin call by its libraries' initialisation). It is a
// separate binary from the plugins' multi-call binary so that neither pays
// for the other's dependencies.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
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
		os.Exit(install(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "daemon" {
		os.Exit(execDaemon())
	}
	if len(os.Args) > 1 && os.Args[1] == "write-status" { // started by ADD with asyncNetworkStatus
		os.Exit(plugin.WriteStatusMain(os.Stdin))
	}
	skel.Main(plugin.Plugin())
}

func install(args []string) int {
	fs := flag.NewFlagSet("multinet install", flag.ContinueOnError)
	src := fs.String("config", "", "multinet .conf/.conflist file to install")
	dest := fs.String("dest", "/etc/cni/net.d", "CNI configuration directory of the runtime")
	timeout := fs.Duration("timeout", 0, "give up after this long (0: wait forever)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *src == "" {
		fmt.Fprintln(os.Stderr, "multinet install: -config is required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	path, err := plugin.Install(ctx, *src, *dest, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "multinet install:", err)
		return 1
	}
	fmt.Println("installed", path)
	return 0
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
