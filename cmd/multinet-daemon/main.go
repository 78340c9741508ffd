// Command multinet-daemon is multinet's thick mode: the per-node daemon
// that the shims (cmd/multinet-shim) forward CNI calls to. "multinet daemon
// -config FILE" runs it too: multinet execs this binary, found beside
// itself, so that the thin plugin does not pay at every start for the
// daemon's libraries (client-go, Prometheus: about 5-20 ms of package
// initialisation measured here).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/patchbay-cni/patchbay/multinet/daemon"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "daemon" { // exec'd by "multinet daemon"
		args = args[1:]
	}
	fs := flag.NewFlagSet("multinet daemon", flag.ContinueOnError)
	config := fs.String("config", daemon.DefaultConfigFile, "the daemon's configuration file (JSON)")
	node := fs.String("node-name", "", "this node's name (default: $NODE_NAME, the configuration's nodeName, the hostname)")
	saDir := fs.String("serviceaccount-dir", daemon.DefaultServiceAccountDir, "in-cluster service account token and ca.crt")
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	cfg, err := daemon.LoadConfig(*config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "multinet daemon:", err)
		os.Exit(1)
	}
	d, err := daemon.New(cfg, daemon.Options{NodeName: *node, ServiceAccountDir: *saDir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "multinet daemon:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if err := d.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "multinet daemon:", err)
		d.Shutdown()
		os.Exit(1)
	}
	<-sig
	d.Shutdown()
}
