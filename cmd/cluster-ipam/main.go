// Command cluster-ipam is the cluster-wide IPAM CNI plugin (type
// "cluster-ipam", see clusteripam/README.md). Run by a runtime (CNI_COMMAND
// set) it is the plugin. Run as
//
//	cluster-ipam reconcile [--kubeconfig FILE] [--interval D] [--network NAME] [--dry-run]
//
// it frees the addresses of pods that are gone, once or every interval
// (as a Deployment). It is its own binary, not part of the plugins'
// multi-call binary: it talks to the Kubernetes API.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/patchbay-cni/patchbay/clusteripam"
	"github.com/patchbay-cni/patchbay/skel"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "reconcile" {
		os.Exit(reconcile(os.Args[2:]))
	}
	// One short-lived invocation allocates little: collecting garbage
	// would only cost time.
	debug.SetGCPercent(-1)
	skel.Main(clusteripam.Plugin())
}

func reconcile(args []string) int {
	fs := flag.NewFlagSet("cluster-ipam reconcile", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: the pod's service account)")
	interval := fs.Duration("interval", 0, "reconcile every interval until stopped (0: once)")
	network := fs.String("network", "", "only allocations made by attachments of this CNI network")
	dryRun := fs.Bool("dry-run", false, "report what would be freed, free nothing")
	level := fs.String("log-level", "info", "debug, info (verbose), warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cluster-ipam reconcile: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	l := clusteripam.LogLevel(*level)
	if l == nil {
		fmt.Fprintf(os.Stderr, "cluster-ipam reconcile: --log-level %q is not debug, info, warn or error\n", *level)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: *l}))
	c, err := clusteripam.NewClient(*kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster-ipam reconcile:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := clusteripam.ReconcileOptions{Network: *network, DryRun: *dryRun, Log: log}
	if *interval <= 0 {
		rep, err := clusteripam.Reconcile(ctx, c, o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cluster-ipam reconcile:", err)
			return 1
		}
		printReport(rep)
		if len(rep.Errors) > 0 {
			return 1
		}
		return 0
	}
	clusteripam.Run(ctx, c, *interval, o, func(rep *clusteripam.ReconcileReport, err error) {
		if err != nil {
			log.Error("reconcile failed", "error", err)
			return
		}
		log.Info("reconciled", "report", rep.String(), "at", time.Now().UTC().Format(time.RFC3339))
	})
	return 0
}

func printReport(rep *clusteripam.ReconcileReport) {
	for _, f := range rep.Freed {
		fmt.Println("freed", f)
	}
	for _, r := range rep.Released {
		fmt.Println("released", r)
	}
	for _, e := range rep.Errors {
		fmt.Println("error", e)
	}
	fmt.Println(rep.String())
}
