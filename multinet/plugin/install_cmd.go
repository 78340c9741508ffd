package plugin

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
)

// InstallCommand is `multinet install ARGS`; it returns the exit status.
//
//	multinet install -config FILE.conflist -dest DIR [-timeout D]
//	    installs a hand-written conflist as it is, once the cluster network is ready
//	multinet install -mode thick|thin -config multinet.json [flags]
//	    what the DaemonSet runs: binaries, readiness, cniVersion, credentials, conflist
//	multinet install -check -cni-conf-dir DIR
//	    exit 0 when multinet's conflist is the one the runtime uses (a readiness probe)
func InstallCommand(args []string, stdout, stderr io.Writer) int {
	// main turns the collector off for the short-lived plugin; -watch runs
	// for months.
	debug.SetGCPercent(100)
	fs := flag.NewFlagSet("multinet install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "", "with -mode: multinet's configuration (a JSON object of the multinet plugin's keys, the ConfigMap's multinet.json); without: a complete .conf/.conflist installed as it is")
	dest := fs.String("dest", "/etc/cni/net.d", "without -mode: the runtime's CNI configuration directory")
	timeout := fs.Duration("timeout", 0, "give up waiting for the cluster network after this long (0: wait forever)")
	mode := fs.String("mode", "", "thick (the shim, asking `multinet daemon`) or thin (the multinet plugin itself)")
	confDir := fs.String("cni-conf-dir", "/etc/cni/net.d", "the node's CNI configuration directory (mounted at the same path)")
	binDir := fs.String("cni-bin-dir", "/opt/cni/bin", "the node's CNI plugin directory (mounted at the same path)")
	src := fs.String("src", "/", "directory holding our binaries (the image's root); empty: copy none")
	plugins := fs.String("plugins", PluginsMissing, "our plugin types to install: missing (where the name is free or already ours), replace (all), none")
	cniVersion := fs.String("cni-version", envOr("MULTINET_CNI_VERSION", "auto"), "cniVersion of the conflist: auto (from the node's container runtime), or 0.4.0, 1.0.0, 1.1.0 (env MULTINET_CNI_VERSION)")
	node := fs.String("node", os.Getenv("NODE_NAME"), "this node's name (env NODE_NAME, from the downward API)")
	sa := fs.String("service-account", envOr("SERVICE_ACCOUNT", "multinet"), "the pod's service account (env SERVICE_ACCOUNT)")
	kubeServer := fs.String("kube-server", "", "thin: the apiserver URL for the plugin's kubeconfig (default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)")
	watch := fs.Bool("watch", false, "keep running: renew the thin plugin's token and restore the conflist if it is removed or no longer first")
	interval := fs.Duration("interval", 10*time.Second, "with -watch: how often to check")
	check := fs.Bool("check", false, "exit 0 when multinet's conflist is the first in -cni-conf-dir (readiness probe)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "multinet install: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *check {
		p, ok := InstalledConf(*confDir)
		if !ok {
			fmt.Fprintf(stderr, "multinet install -check: no multinet configuration is first in %s (%s)\n", *confDir, p)
			return 1
		}
		fmt.Fprintln(stdout, "installed", p)
		return 0
	}
	if *config == "" {
		fmt.Fprintln(stderr, "multinet install: -config is required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *mode == "" {
		path, err := Install(ctx, *config, *dest, *timeout)
		if err != nil {
			fmt.Fprintln(stderr, "multinet install:", err)
			return 1
		}
		fmt.Fprintln(stdout, "installed", path)
		return 0
	}
	data, err := os.ReadFile(*config)
	if err != nil {
		fmt.Fprintln(stderr, "multinet install:", err)
		return 1
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("cmd", "multinet install")
	o := &NodeInstall{
		Mode: *mode, Config: data, SrcDir: *src, BinDir: *binDir, ConfDir: *confDir, Plugins: *plugins,
		CNIVersion: *cniVersion, NodeName: *node, KubeServer: *kubeServer, Timeout: *timeout, Log: log,
	}
	if api, err := InClusterAPI(*sa); err == nil {
		o.API = api
	} else {
		log.Warn("no API access: the node's runtime is not read (cniVersion assumed) and the thin plugin gets no node-bound token", "err", err)
	}
	inst, err := InstallNode(ctx, o)
	if err != nil {
		log.Error("install failed", "err", err)
		return 1
	}
	if !*watch {
		return 0
	}
	if err := Watch(ctx, o, inst, *interval); err != nil {
		log.Error("watch failed", "err", err)
		return 1
	}
	return 0
}

// UninstallCommand is `multinet uninstall ARGS` (the DaemonSet's preStop
// hook, or by hand); it returns the exit status.
func UninstallCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("multinet uninstall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	confDir := fs.String("cni-conf-dir", "/etc/cni/net.d", "the node's CNI configuration directory")
	binDir := fs.String("cni-bin-dir", "/opt/cni/bin", "the node's CNI plugin directory (with -binaries)")
	binaries := fs.Bool("binaries", false, "also remove our binaries (multinet, the shim, patchbay-plugins and its links)")
	whenDeleted := fs.String("when-deleted", "", "[NAMESPACE/]NAME of the DaemonSet (default namespace: the pod's): uninstall only if it is deleted (not on a restart or an upgrade)")
	sa := fs.String("service-account", envOr("SERVICE_ACCOUNT", "multinet"), "the pod's service account (env SERVICE_ACCOUNT)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *whenDeleted != "" {
		ns, name, ok := strings.Cut(*whenDeleted, "/")
		if !ok {
			ns, name = "", *whenDeleted
		}
		if (ok && ns == "") || name == "" || strings.Contains(name, "/") {
			fmt.Fprintf(stderr, "multinet uninstall: -when-deleted %q: want [NAMESPACE/]NAME\n", *whenDeleted)
			return 2
		}
		api, err := InClusterAPI(*sa)
		if err != nil {
			fmt.Fprintln(stderr, "multinet uninstall: keeping multinet installed: cannot ask the apiserver:", err)
			return 0
		}
		if ns == "" {
			ns = api.Namespace
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gone, why, err := api.DaemonSetGone(ctx, ns, name)
		if err != nil || !gone {
			fmt.Fprintf(stdout, "multinet uninstall: keeping multinet installed: %s%v\n", why, errOrNil(err))
			return 0
		}
		fmt.Fprintf(stdout, "multinet uninstall: %s\n", why)
	}
	bin := ""
	if *binaries {
		bin = *binDir
	}
	removed, err := Uninstall(*confDir, bin)
	for _, p := range removed {
		fmt.Fprintln(stdout, "removed", p)
	}
	if err != nil {
		fmt.Fprintln(stderr, "multinet uninstall:", err)
		return 1
	}
	return 0
}

func errOrNil(err error) any {
	if err == nil {
		return ""
	}
	return err
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
