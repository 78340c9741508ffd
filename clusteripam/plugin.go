package clusteripam

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/kube"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin is the CNI IPAM plugin "cluster-ipam".
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type: Type, Add: cmdAdd, Del: cmdDel, Check: cmdCheck, GC: cmdGC, Status: cmdStatus,
		About: "cluster-ipam: cluster-wide IPAM CNI plugin on the Kubernetes API (clusteripam/README.md); " +
			"`cluster-ipam reconcile --kubeconfig FILE [--interval D]` frees the addresses of gone pods",
	}
}

// APITimeout bounds each API request of a plugin invocation.
const APITimeout = 10 * time.Second

// NewClient connects with a kubeconfig file, or with the pod's service
// account when kubeconfig is empty.
func NewClient(kubeconfig string) (*kube.Client, error) {
	var cfg *kube.Config
	var err error
	if kubeconfig != "" {
		cfg, err = kube.LoadKubeconfig(kubeconfig)
	} else {
		cfg, err = kube.InCluster()
	}
	if err != nil {
		return nil, err
	}
	c, err := kube.New(cfg, APITimeout)
	if err != nil {
		return nil, err
	}
	c.UserAgent = "cluster-ipam"
	return c, nil
}

// LogLevel maps whereabouts' log_level names (and slog's) to a level; nil
// for an unknown name.
func LogLevel(s string) *slog.Level {
	var l slog.Level
	switch strings.ToLower(s) {
	case "debug":
		l = slog.LevelDebug
	case "verbose", "info":
		l = slog.LevelInfo
	case "warn", "warning":
		l = slog.LevelWarn
	case "error", "panic":
		l = slog.LevelError
	default:
		return nil
	}
	return &l
}

// invocation is what every verb sets up.
type invocation struct {
	c   *Config // nil when DEL could not validate the configuration
	al  *Allocator
	at  Attachment
	out io.Closer
}

func (inv *invocation) close() {
	if inv.out != nil {
		inv.out.Close()
	}
}

// setup parses the configuration and connects. lenient (DEL) goes on
// without a valid configuration, as long as the credentials are known:
// DEL then finds the attachment's allocations by label.
func setup(a *skel.CmdArgs, lenient bool) (*invocation, error) {
	c, err := ParseConfig(a.StdinData, a.Args, os.ReadFile)
	var kubeconfig, logFile, logLevel, node string
	if err == nil {
		kubeconfig, logFile, logLevel, node = c.Kubeconfig, c.LogFile, c.LogLevel, c.NodeName
	} else {
		if !lenient {
			return nil, err
		}
		a.Log.Warn("DEL: configuration invalid; freeing by attachment", "error", err)
		c = nil
		var n netConf
		if jerr := json.Unmarshal(a.StdinData, &n); jerr == nil {
			if ipam, ierr := mergedIPAM(n.IPAM, os.ReadFile); ierr == nil {
				kubeconfig, logFile, logLevel, node = ipam.Kubernetes.Kubeconfig, ipam.LogFile, ipam.LogLevel, ipam.NodeName
			}
		}
	}
	inv := &invocation{c: c}
	log := a.Log
	if logFile != "" {
		f, ferr := os.OpenFile(logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if ferr != nil {
			return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "cluster-ipam: ipam.log_file %q: %v", logFile, ferr)
		}
		inv.out = f
		level := slog.LevelInfo
		if l := LogLevel(logLevel); l != nil {
			level = *l
		}
		log = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: level})).With("plugin", Type,
			"verb", a.Command, "container", short(a.ContainerID), "ifname", a.IfName)
	}
	client, err := NewClient(kubeconfig)
	if err != nil {
		inv.close()
		return nil, &credentialsError{spec.Errorf(spec.ErrInvalidNetworkConfig, "cluster-ipam: Kubernetes API credentials (ipam.kubernetes.kubeconfig %q): %v", kubeconfig, err)}
	}
	inv.al = &Allocator{Client: client, Log: log}
	inv.at = Attachment{Network: a.Conf.Name, ContainerID: a.ContainerID, IfName: a.IfName, Node: node}
	if c != nil {
		inv.at.Pod = c.Pod
	}
	return inv, nil
}

func ctxOf(a *skel.CmdArgs) context.Context {
	if a.Ctx != nil {
		return a.Ctx
	}
	return context.Background()
}

func cmdAdd(a *skel.CmdArgs) (*spec.Result, error) {
	inv, err := setup(a, false)
	if err != nil {
		return nil, err
	}
	defer inv.close()
	t0 := time.Now()
	got, err := inv.al.Add(ctxOf(a), inv.c, inv.at)
	if err != nil {
		inv.al.log().Warn("ADD failed", "error", err)
		return nil, err
	}
	res := &spec.Result{CNIVersion: a.Version, Routes: inv.c.Routes, DNS: inv.c.DNS}
	var addrs []string
	for _, g := range got {
		res.IPs = append(res.IPs, &spec.IPConfig{Address: g.Address, Gateway: g.Gateway})
		addrs = append(addrs, g.Address.String())
	}
	inv.al.log().Info("ADD", "addresses", strings.Join(addrs, ","), "pod", inv.at.Pod.String(), "took", time.Since(t0))
	return res, nil
}

// credentialsError: no usable credentials at all (no kubeconfig file, not
// in a pod).
type credentialsError struct{ err *spec.Error }

func (e *credentialsError) Error() string { return e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }

func cmdDel(a *skel.CmdArgs) error {
	inv, err := setup(a, true)
	var ce *credentialsError
	if errors.As(err, &ce) {
		// Nothing can be freed without credentials, and failing would
		// block the pod's teardown for good; what the attachment holds is
		// freed by GC or the reconciler.
		a.Log.Warn("DEL: no Kubernetes API credentials; nothing freed", "error", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer inv.close()
	if err := inv.al.Del(ctxOf(a), inv.c, inv.at, a.Conf.PrevResult); err != nil {
		inv.al.log().Warn("DEL failed", "error", err)
		return err
	}
	return nil
}

func cmdCheck(a *skel.CmdArgs) error {
	inv, err := setup(a, false)
	if err != nil {
		return err
	}
	defer inv.close()
	return inv.al.Check(ctxOf(a), inv.c, inv.at, a.Conf.PrevResult)
}

// cmdGC frees this node's allocations of the network whose attachments
// the runtime no longer lists, then reconciles the network's allocations
// (gone pods and claims, any node).
func cmdGC(a *skel.CmdArgs) error {
	inv, err := setup(a, false)
	if err != nil {
		return err
	}
	defer inv.close()
	ctx := ctxOf(a)
	n, err := inv.al.SweepNode(ctx, a.Conf.Name, inv.at.Node, a.Conf.Attachments())
	if err != nil {
		return err
	}
	rep, err := Reconcile(ctx, inv.al.Client, ReconcileOptions{Network: a.Conf.Name, Log: inv.al.log()})
	if err != nil {
		return err
	}
	inv.al.log().Info("GC", "sweptOnNode", n, "reconcile", rep.String())
	if len(rep.Errors) > 0 {
		return spec.Errorf(spec.ErrTryAgainLater, "cluster-ipam: GC: %s", strings.Join(rep.Errors, "; "))
	}
	return nil
}

// cmdStatus reports whether ADD can work: the API answers with these
// credentials and serves IPAllocations.
func cmdStatus(a *skel.CmdArgs) error {
	inv, err := setup(a, false)
	if err != nil {
		return err
	}
	defer inv.close()
	var out struct{}
	if err := inv.al.Client.Get(ctxOf(a), collection+"?limit=1", false, &out); err != nil {
		return spec.Errorf(spec.ErrPluginNotAvailable, "cluster-ipam: the Kubernetes API cannot be used: %v", apiError("listing IPAllocations", err))
	}
	return nil
}
