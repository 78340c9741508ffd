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

	"github.com/patchbay-cni/patchbay/multinet/kube"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the skel plugin of multinet.
func Plugin() skel.Plugin {
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
func runVerb(a *skel.CmdArgs, verb string, f func(*invocation) error) error {
	inv, done, err := newInvocation(a)
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

	client    *kube.Client
	clientErr error
	clientSet bool
	start     time.Time
	// writer delivers the status writer started for asyncNetworkStatus.
	writer chan *statusWriter
	// delegateTime sums the delegate chains' run times (for the benchmark).
	delegateTime time.Duration
	// summary is what the verb's log line reports (logVerb).
	summary verbSummary
}

// processStart approximates the process start (package init time).
var processStart = time.Now()

func newInvocation(a *skel.CmdArgs) (*invocation, func(), error) {
	cfg, err := ParseConfig(a.StdinData)
	if err != nil {
		return nil, nil, err
	}
	stderr := a.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	log, closeLog := newLogger(cfg, stderr)
	inv := &invocation{cfg: cfg, args: a, log: log, start: time.Now()}
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
	inv.cni = &runtime.CNI{Path: path, CacheDir: cfg.CNIDir, Stderr: a.Stderr, Log: log}
	return inv, closeLog, nil
}

// kube returns the API client, or an error when none is configured.
func (inv *invocation) kube() (*kube.Client, error) {
	if inv.clientSet {
		return inv.client, inv.clientErr
	}
	inv.clientSet = true
	var kc *kube.Config
	var err error
	if inv.cfg.Kubeconfig != "" {
		kc, err = kube.LoadKubeconfig(inv.cfg.Kubeconfig)
	} else {
		kc, err = kube.InCluster()
	}
	if err == nil {
		inv.client, err = kube.New(kc, inv.cfg.apiTimeout())
	}
	if err != nil {
		inv.clientErr = spec.Errorf(spec.ErrInvalidNetworkConfig, "Kubernetes API client: %v", err)
	}
	return inv.client, inv.clientErr
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
