package plugin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/internal/invoke"
	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/multinet/kube"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the skel plugin of multinet as the thin plugin runs it: a
// process per call, its own lean API client.
func Plugin() skel.Plugin { return PluginFor(nil) }

// Host is what the verbs run on. The thin plugin (a process per call) uses
// nil; the daemon (thick mode) gives every request one, so that both run
// this package's verbs, not two copies of them.
type Host struct {
	// API reaches the apiserver; nil means the lean client (multinet/kube)
	// built from the configuration's kubeconfig or the in-cluster service
	// account, once per invocation.
	API API
	// Exec runs the delegate plugins; nil means invoke.Runner{}.
	Exec Executor
	// Log, when set, is the logger (the configuration's logFile and
	// logLevel are then the host's business).
	Log *slog.Logger
	// Start is when the caller started (the shim's process start), from
	// which "took" and the debug timings count; zero means this process's
	// start.
	Start time.Time
	// AsyncStatus, when set, runs an asyncNetworkStatus job (in the
	// daemon, a goroutine it waits for at shutdown); nil starts a detached
	// "multinet write-status" process.
	AsyncStatus func(run func())
	// Observe, when set, is told every attachment's outcome per verb
	// (metrics).
	Observe func(verb, network string, err error)
	// LocalReads says that API's cached reads are served from memory
	// (informers): ADD then reads before anything else, without
	// goroutines, and there is no plugin start to overlap them with.
	LocalReads bool
}

// API is what the verbs need from the apiserver (kube.Client implements
// it). cached reads may be served from a cache (the apiserver's watch
// cache, the daemon's informers); callers read again uncached when a cached
// read says "not found" or returns another object of the same name.
// Errors for HTTP answers are *kube.StatusError.
type API interface {
	GetPod(ctx context.Context, ns, name string, cached bool) (*kube.Pod, error)
	GetNAD(ctx context.Context, ns, name string, cached bool) (*api.NetworkAttachmentDefinition, error)
	SetNetworkStatus(ctx context.Context, ns, name, uid, value string, attempts int) error
	ClearNetworkStatus(ctx context.Context, ns, name, uid, value string) (bool, error)
	CreateEvent(ctx context.Context, pod *kube.Pod, typ, reason, message, component, host string) error
}

// Executor runs delegate plugins (invoke.Runner implements it).
type Executor interface {
	Exec(ctx context.Context, path string, env []string, stdin []byte, stderr io.Writer) ([]byte, error)
	ExecHeld(ctx context.Context, path string, env []string, hold func(context.Context) ([]byte, error), stderr io.Writer) ([]byte, error)
}

// PluginFor returns the skel plugin of multinet running on h (nil: the
// thin plugin).
func PluginFor(h *Host) skel.Plugin {
	if h == nil {
		h = &Host{}
	}
	runVerb := func(a *skel.CmdArgs, verb string, f func(*invocation) error) error { return runVerb(h, a, verb, f) }
	return skel.Plugin{
		Type: "multinet",
		Add: func(a *skel.CmdArgs) (*spec.Result, error) {
			var res *spec.Result
			err := runVerb(a, spec.CmdAdd, func(inv *invocation) (err error) {
				res, err = inv.cmdAdd()
				return err
			})
			return res, err
		},
		Del:    func(a *skel.CmdArgs) error { return runVerb(a, spec.CmdDel, (*invocation).cmdDel) },
		Check:  func(a *skel.CmdArgs) error { return runVerb(a, spec.CmdCheck, (*invocation).cmdCheck) },
		GC:     func(a *skel.CmdArgs) error { return runVerb(a, spec.CmdGC, (*invocation).cmdGC) },
		Status: func(a *skel.CmdArgs) error { return runVerb(a, spec.CmdStatus, (*invocation).cmdStatus) },
		About:  "multinet: CNI delegating plugin (multi-net spec v1.3); see multinet/README.md",
		// Its delegates, run through the runtime library, take the
		// attachment lock themselves; the container lock serialises multinet.
		SkipAttachmentLock: true,
	}
}

// runVerb runs one verb: it logs the verb's one line (logVerb) and gives
// the error returned to the runtime its only context prefix (verbError).
func runVerb(h *Host, a *skel.CmdArgs, verb string, f func(*invocation) error) error {
	inv, done, err := newInvocation(h, a)
	if err != nil {
		return verbError(a, verb, err)
	}
	defer done()
	err = f(inv)
	inv.logVerb(verb, err)
	return verbError(a, verb, err)
}

// verbError is the one place where an error returned to the runtime gets
// its context: "multinet: pod <ns>/<name>: <VERB> failed: <what failed>"
// (the container ID stands in for the pod when CNI_ARGS do not name one).
// Messages made below it say what failed and never who or which plugin,
// so that no wrapping repeats this prefix.
func verbError(a *skel.CmdArgs, verb string, err error) error {
	if err == nil {
		return nil
	}
	ce := spec.AsError(err, spec.ErrInternal)
	who := ""
	if verb != spec.CmdGC && verb != spec.CmdStatus {
		pairs, _ := spec.ParseCNIArgs(a.Args)
		p := podArgsOf(pairs)
		switch {
		case p.Namespace != "" && p.Name != "":
			who = "pod " + p.ref() + ": "
		case a.ContainerID != "":
			who = "container " + a.ContainerID + ": "
		}
	}
	return &spec.Error{Code: ce.Code, Msg: "multinet: " + who + verb + " failed: " + ce.Msg, Details: ce.Details}
}

// podArgs are the Kubernetes CNI_ARGS a CRI runtime sets.
type podArgs struct {
	Namespace, Name, UID, InfraID string
}

func podArgsOf(pairs [][2]string) podArgs {
	var p podArgs
	for _, kv := range pairs {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			p.Namespace = kv[1]
		case "K8S_POD_NAME":
			p.Name = kv[1]
		case "K8S_POD_UID":
			p.UID = kv[1]
		case "K8S_POD_INFRA_CONTAINER_ID":
			p.InfraID = kv[1]
		}
	}
	return p
}

func (p podArgs) ref() string { return p.Namespace + "/" + p.Name }

// invocation is one verb's state.
type invocation struct {
	cfg   *Config
	args  *skel.CmdArgs
	log   *slog.Logger
	cni   *runtime.CNI
	pod   podArgs
	rargs [][2]string // CNI_ARGS, passed to every delegate

	host      *Host
	exec      Executor
	client    API
	clientErr error
	clientSet bool
	// start is when the caller started: the process (thin) or the shim
	// (thick); "took" and the debug timings count from it.
	start time.Time
	// writer delivers the status writer started for asyncNetworkStatus.
	writer chan statusSender
	// delegateTime sums the delegate chains' run times (for the benchmark).
	delegateTime time.Duration
	// policyTime is what the NAD policy check took (for the benchmark).
	policyTime time.Duration
	// summary is what the verb's log line reports (logVerb).
	summary verbSummary
}

// processStart approximates the process start (package init time).
var processStart = time.Now()

func newInvocation(h *Host, a *skel.CmdArgs) (*invocation, func(), error) {
	cfg, err := ParseConfig(a.StdinData)
	if err != nil {
		return nil, nil, err
	}
	stderr := a.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	log, closeLog := h.Log, func() {}
	if log == nil {
		log, closeLog = NewLogger(cfg, stderr)
	}
	inv := &invocation{cfg: cfg, args: a, log: log, host: h, exec: h.Exec, start: h.Start}
	if inv.exec == nil {
		inv.exec = invoke.Runner{}
	}
	if inv.start.IsZero() {
		inv.start = processStart
	}
	pairs, err := spec.ParseCNIArgs(a.Args)
	if err != nil {
		closeLog()
		return nil, nil, err
	}
	inv.rargs, inv.pod = pairs, podArgsOf(pairs)
	var path []string
	if cfg.BinDir != "" {
		path = append(path, cfg.BinDir)
	}
	for _, d := range filepath.SplitList(a.Path) {
		if d != "" && d != cfg.BinDir {
			path = append(path, d)
		}
	}
	if len(path) == 0 {
		path = []string{DefaultBinDir}
	}
	inv.cni = &runtime.CNI{Path: path, CacheDir: cfg.CNIDir, Stderr: a.Stderr, Log: log, Exec: inv.exec.Exec}
	return inv, closeLog, nil
}

// kube returns the API client, or an error when none is configured.
func (inv *invocation) kube() (API, error) {
	if inv.clientSet {
		return inv.client, inv.clientErr
	}
	inv.clientSet = true
	if inv.host.API != nil {
		inv.client = inv.host.API
		return inv.client, nil
	}
	var kc *kube.Config
	var err error
	if inv.cfg.Kubeconfig != "" {
		kc, err = kube.LoadKubeconfig(inv.cfg.Kubeconfig)
	} else {
		kc, err = kube.InCluster()
	}
	var c *kube.Client
	if err == nil {
		c, err = kube.New(kc, inv.cfg.apiTimeout())
	}
	if err != nil {
		inv.clientErr = spec.Errorf(spec.ErrInvalidNetworkConfig, "Kubernetes API client: %v", err)
		return nil, inv.clientErr
	}
	inv.client = c
	return c, nil
}

func (inv *invocation) ctx() context.Context {
	if inv.args.Ctx != nil {
		return inv.args.Ctx
	}
	return context.Background()
}

// waitReady blocks until the readiness indicator file exists (§6.1), up
// to the readiness timeout: the cluster network may still be starting.
func (inv *invocation) waitReady(ctx context.Context) error {
	f := inv.cfg.ReadinessIndicatorFile
	if f == "" {
		return nil
	}
	deadline := time.Now().Add(inv.cfg.readinessTimeout())
	for {
		if _, err := os.Stat(f); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return spec.Errorf(spec.ErrTryAgainLater, "the cluster network is not ready: readiness indicator file %s does not exist after %v", f, inv.cfg.readinessTimeout())
		}
		select {
		case <-ctx.Done():
			return spec.Errorf(spec.ErrTryAgainLater, "waiting for readiness indicator file %s: %v", f, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (inv *invocation) rt(a *Attachment) *runtime.RuntimeConf {
	args := inv.rargs
	if a.CNIArgs != nil {
		args = a.CNIArgs
	}
	return &runtime.RuntimeConf{
		ContainerID: inv.args.ContainerID, NetNS: inv.args.Netns, IfName: a.IfName,
		Args: args, CapabilityArgs: a.CapabilityArgs,
	}
}

// podCNIArgs are the CNI_ARGS of a selected network's plugins:
// IgnoreUnknown=1 and the runtime's K8S_POD_* keys, as Multus passes them.
// Other keys the runtime sets (IP=, MAC=, ...) are meant for the cluster
// network, like its runtimeConfig (§7.5): host-local would otherwise try
// to give the cluster network's requested IP on every attachment.
func podCNIArgs(runtimeArgs [][2]string) [][2]string {
	out := [][2]string{{"IgnoreUnknown", "1"}}
	for _, kv := range runtimeArgs {
		switch kv[0] {
		case "K8S_POD_NAMESPACE", "K8S_POD_NAME", "K8S_POD_INFRA_CONTAINER_ID", "K8S_POD_UID":
			out = append(out, kv)
		}
	}
	return out
}

// joinErrors turns several delegate errors into one *spec.Error: the code
// of the first, every message in order.
func joinErrors(prefix string, errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	first := spec.AsError(errs[0], spec.ErrInternal)
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return &spec.Error{Code: first.Code, Msg: prefix + strings.Join(msgs, "; ")}
}

func describe(a *Attachment) string {
	return fmt.Sprintf("network %q (interface %s)", a.Name, a.IfName)
}

// observe reports an attachment's outcome to the host (metrics).
func (inv *invocation) observe(verb string, att *Attachment, err error) {
	if inv.host.Observe != nil {
		inv.host.Observe(verb, att.Name, err)
	}
}
