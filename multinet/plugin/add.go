package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/multinet/kube"
	"github.com/patchbay-cni/patchbay/multinet/selection"
	"github.com/patchbay-cni/patchbay/multinet/status"
	"github.com/patchbay-cni/patchbay/spec"
)

// IPAMClaimArg is the args.cni key under which every plugin of an
// attachment with "ipam-claim-reference" receives the IPAMClaim's name
// (§4.1.2.1.11); the claim is in the pod's namespace (K8S_POD_NAMESPACE).
const IPAMClaimArg = "ipam-claim-reference"

// cmdAdd attaches the cluster network, then the selected ones (§6.2).
//
// Nothing is attached before the pod's annotations and every
// NetworkAttachmentDefinition they need are read and checked: a pod whose
// ADD will fail (malformed annotation, missing NAD, namespace isolation,
// undeclared capability, a NAD running multinet) fails with nothing done,
// however often the kubelet retries — no address is taken from the cluster
// network's IPAM and given back each time.
//
// The reads must not make a valid pod wait either. Reading while the
// cluster network is attached (as this did before) hides them but attaches
// for nothing when the pod is refused; reading first puts all of them on
// the critical path. The order that does both: the reads start first, in
// a goroutine; meanwhile this goroutine takes the lock, prepares the
// cluster network and *starts* its ADD, whose first plugin is held, before
// it has read its configuration, until the reads are checked and the plan
// is written (heldAdd). So the plugin's process start — the largest piece
// of work that precedes an attachment without being one — overlaps the
// reads; a refused pod's held plugin is killed having received nothing.
// What the reads take beyond that start stays on the critical path
// (README "API client and speed" has the numbers).
func (inv *invocation) cmdAdd() (*spec.Result, error) {
	ctx := inv.ctx()
	if err := inv.waitReady(ctx); err != nil {
		return nil, err
	}
	cfg := inv.cfg
	clusterList, onDisk, err := clusterFromDisk(cfg)
	if onDisk && err != nil {
		return nil, err
	}
	withAPI := inv.pod.Name != "" && inv.pod.Namespace != ""
	if !withAPI && !onDisk {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig,
			"clusterNetwork %q is neither a file, a directory nor a network in %s, and without pod arguments (K8S_POD_NAMESPACE, K8S_POD_NAME) no NetworkAttachmentDefinition can be read",
			cfg.ClusterNetwork, cfg.ConfDir)
	}
	var reads <-chan apiAnswer
	if withAPI {
		clusterRef := ""
		if !onDisk {
			clusterRef = qualify(cfg.ClusterNetwork, cfg.MultusNamespace)
		}
		reads = inv.startReads(ctx, clusterRef)
	}
	if cfg.AsyncNetworkStatus && withAPI {
		inv.writer = make(chan statusSender, 1)
		go func() {
			w, err := inv.startStatusWriter()
			if err != nil {
				inv.log.Error("cannot start the network status writer", "pod", inv.pod.ref(), "error", err)
			}
			inv.writer <- w // nil when it failed
		}()
		// Every return without a job stops the writer.
		defer func() {
			if w := inv.takeWriter(); w != nil {
				w.abort()
			}
		}()
	}
	lock, err := inv.lockContainer(ctx)
	if err != nil {
		return nil, err
	}
	defer lock.unlock(false)
	return inv.add(ctx, clusterList, reads)
}

// apiAnswer is what the API reads of ADD produced.
type apiAnswer struct {
	info *apiInfo // nil: no API access, the cluster network only
	err  error
}

// startReads reads the pod and its NetworkAttachmentDefinitions in a
// goroutine (the client, kubeconfig and TLS setup included); clusterRef is
// the cluster network's NAD when it is not on disk.
func (inv *invocation) startReads(ctx context.Context, clusterRef string) <-chan apiAnswer {
	ch := make(chan apiAnswer, 1)
	run := func(f func()) { go f() }
	if inv.host.LocalReads {
		run = func(f func()) { f() } // done when this returns
	}
	run(func() {
		ts := time.Now()
		client, err := inv.kube()
		if err != nil {
			if clusterRef != "" { // the cluster network itself needs the API
				ch <- apiAnswer{err: err}
				return
			}
			inv.log.Warn("no Kubernetes API access: attaching the cluster network only", "pod", inv.pod.ref(), "error", err)
			ch <- apiAnswer{}
			return
		}
		tc := time.Now()
		info, err := inv.readAPI(ctx, client, clusterRef)
		if info != nil {
			inv.log.Debug("API reads", "client_us", tc.Sub(ts).Microseconds(), "pod_us", info.podRead.Microseconds(),
				"total_us", time.Since(ts).Microseconds())
		}
		ch <- apiAnswer{info, err}
	})
	return ch
}

// add decides every attachment (waiting for the reads), writes the plan,
// then attaches in order; a failure from then on rolls back (§7.2). The
// cluster network's ADD, when it is on disk, starts with the reads and is
// held before its first plugin reads its configuration (heldAdd) until
// everything is checked and the plan written.
func (inv *invocation) add(ctx context.Context, clusterList *spec.ConfList, reads <-chan apiAnswer) (_ *spec.Result, err error) {
	a, cfg := inv.args, inv.cfg
	plan := &Plan{ContainerID: a.ContainerID, NetNS: a.Netns, PodNamespace: inv.pod.Namespace,
		PodName: inv.pod.Name, PodUID: inv.pod.UID, CNIArgs: inv.rargs}
	t0 := time.Now()
	var def *Attachment
	var held *heldAdd
	var ans *apiAnswer
	select {
	case a := <-reads: // already done (LocalReads): nothing to overlap them with
		ans = &a
	default:
	}
	if clusterList != nil {
		if def, err = inv.clusterAttachment(clusterList, cfg.MultusNamespace+"/"+clusterList.Name); err != nil {
			return nil, err
		}
		if reads != nil && ans == nil {
			if held, err = inv.startHeldAdd(ctx, def); err != nil {
				return nil, err
			}
			// Every return before the release kills the held plugin.
			defer func() {
				if held != nil {
					held.refuse()
				}
			}()
		}
	}
	var info *apiInfo
	if reads != nil {
		if ans == nil {
			a := <-reads
			ans = &a
		}
		if ans.err != nil {
			return nil, ans.err
		}
		info = ans.info
	}
	readsDone := time.Since(inv.start)
	if info != nil && (info.override != "" || clusterList == nil) {
		ref := info.override
		if ref == "" {
			ref = qualify(cfg.ClusterNetwork, cfg.MultusNamespace)
		}
		if def, err = inv.clusterAttachment(info.lists[ref], ref); err != nil {
			return nil, err
		}
		if held != nil { // the pod names its own default network
			held.refuse()
			held = nil
		}
	}
	if def == nil {
		return nil, spec.Errorf(spec.ErrInternal, "no cluster network resolved for clusterNetwork %q", cfg.ClusterNetwork)
	}
	plan.Attachments = []*Attachment{def}
	if info != nil {
		plan.PodUID = info.pod.Metadata.UID
		var subjects []policySubject
		if info.override != "" { // the pod's own default network
			ns, _, _ := strings.Cut(info.override, "/")
			subjects = append(subjects, policySubject{def, ns})
		}
		for _, s := range append(slices.Clone(info.defaults), info.sels...) {
			att, err := inv.attachment(s, info.lists[s.Ref()])
			if err != nil {
				return nil, err
			}
			plan.Attachments = append(plan.Attachments, att)
			subjects = append(subjects, policySubject{att, s.Namespace})
		}
		tp := time.Now()
		err := inv.checkPolicy(ctx, info, subjects, clusterNames(clusterList, info, cfg))
		inv.policyTime = time.Since(tp)
		if err != nil {
			return nil, err
		}
	}
	if err := writePlan(cfg.CNIDir, plan); err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "cannot write the cache before delegating: %v", err)
	}
	t1 := time.Now()
	var results []*spec.Result
	var clusterDone time.Duration
	if held != nil {
		h := held
		held = nil
		res, err := h.release()
		inv.observe(spec.CmdAdd, def, err)
		if err != nil {
			return nil, inv.rollback(ctx, plan, 0, fmt.Errorf("%s: %w", describe(def), err))
		}
		results = append(results, res)
		clusterDone = time.Since(inv.start)
	}
	for i := len(results); i < len(plan.Attachments); i++ {
		res, err := inv.addOne(ctx, plan.Attachments[i])
		if err != nil {
			return nil, inv.rollback(ctx, plan, i, err)
		}
		results = append(results, res)
		if i == 0 {
			clusterDone = time.Since(inv.start)
		}
	}
	inv.summary = verbSummary{atts: plan.Attachments, results: results}
	t2 := time.Now()
	if err := inv.applyDefaultRoute(plan, results); err != nil {
		return nil, inv.rollback(ctx, plan, len(plan.Attachments)-1, err)
	}
	inv.routeResults(plan, results)
	if info != nil {
		if err := inv.writeStatus(ctx, info.pod, plan, results); err != nil {
			return nil, inv.rollback(ctx, plan, len(plan.Attachments)-1, err)
		}
	}
	// Timings in µs, for BenchmarkPodAddDel: *_done and total are from
	// process start.
	inv.log.Debug("ADD done", "pod", inv.pod.ref(), "attachments", len(plan.Attachments),
		"reads_done_us", readsDone.Microseconds(), "cluster_done_us", clusterDone.Microseconds(),
		"until_attach_us", t1.Sub(t0).Microseconds(), "attach_us", t2.Sub(t1).Microseconds(),
		"status_us", time.Since(t2).Microseconds(), "policy_us", inv.policyTime.Microseconds(), "delegates_us", inv.delegateTime.Microseconds(),
		"total_us", time.Since(inv.start).Microseconds())
	return results[0], nil
}

// takeWriter returns the started status writer once (nil afterwards, or
// when none was started or it failed to start).
func (inv *invocation) takeWriter() statusSender {
	if inv.writer == nil {
		return nil
	}
	w := <-inv.writer
	inv.writer = nil
	return w
}

func (inv *invocation) addOne(ctx context.Context, att *Attachment) (*spec.Result, error) {
	list, err := att.List()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", describe(att), err)
	}
	inv.log.Debug("ADD", "pod", inv.pod.ref(), "network", att.Name, "ifname", att.IfName)
	start := time.Now()
	res, err := inv.cni.AddNetworkList(ctx, list, inv.rt(att))
	inv.delegateTime += time.Since(start)
	inv.observe(spec.CmdAdd, att, err)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", describe(att), err)
	}
	return res, nil
}

// clusterAttachment is the cluster network's attachment, first (§6.2),
// with the runtime's runtimeConfig (§7.5: no other attachment gets it).
func (inv *invocation) clusterAttachment(l *spec.ConfList, name string) (*Attachment, error) {
	if err := notSelf(l, name); err != nil {
		return nil, err
	}
	def := &Attachment{Name: name, IfName: inv.args.IfName, Default: true, CapabilityArgs: inv.cfg.capabilityArgs()}
	var err error
	if def.Config, err = selfContained(l, nil); err != nil {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "cluster network: %v", err)
	}
	if _, err := def.List(); err != nil {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "cluster network: %v", err)
	}
	return def, nil
}

// rollback implements §7.2 for a failed ADD: DEL of every attempted
// attachment (0..last, in reverse), each even when another fails, and one
// error naming the failure and every DEL that failed.
func (inv *invocation) rollback(ctx context.Context, plan *Plan, last int, cause error) error {
	inv.summary.atts = plan.Attachments[:last+1]
	var delErrs []string
	for i := last; i >= 0; i-- {
		att := plan.Attachments[i]
		list, _ := att.List()
		err := inv.cni.DelNetworkList(ctx, list, inv.rt(att))
		inv.observe(spec.CmdDel, att, err)
		if err != nil {
			delErrs = append(delErrs, fmt.Sprintf("%s: %v", describe(att), err))
		}
	}
	ce := spec.AsError(cause, spec.ErrInternal)
	msg := fmt.Sprintf("%s; the %d attempted attachment(s) were deleted", ce.Msg, last+1)
	if len(delErrs) == 0 {
		removePlan(inv.cfg.CNIDir, plan.ContainerID) // nothing left to undo
	} else {
		msg += fmt.Sprintf(", but %d DEL(s) failed (a later DEL retries them): %s", len(delErrs), strings.Join(delErrs, "; "))
	}
	return &spec.Error{Code: ce.Code, Msg: msg, Details: ce.Details}
}

// apiInfo is what ADD learns from the apiserver.
type apiInfo struct {
	pod *kube.Pod
	// override is the pod's own default network (DefaultNetworkAnnotation).
	override string
	defaults []*selection.Selection // configured defaultNetworks
	sels     []*selection.Selection // the annotation's
	lists    map[string]*spec.ConfList
	podRead  time.Duration // the pod GET's time (for the debug log)
}

// readAPI reads the pod, parses its annotations, checks namespace
// isolation and reads every needed NetworkAttachmentDefinition (one GET
// each, in parallel); clusterRef is the cluster network's NAD, if it is one.
func (inv *invocation) readAPI(ctx context.Context, client API, clusterRef string) (*apiInfo, error) {
	a, cfg := inv.args, inv.cfg
	start := time.Now()
	// The watch cache first; a quorum read when it does not have this pod
	// (not yet, or an older pod of the same name).
	pod, err := client.GetPod(ctx, inv.pod.Namespace, inv.pod.Name, true)
	if err == nil && inv.pod.UID != "" && pod.Metadata.UID != inv.pod.UID || kube.IsNotFound(err) {
		pod, err = client.GetPod(ctx, inv.pod.Namespace, inv.pod.Name, false)
	}
	if err != nil {
		code := spec.ErrTryAgainLater
		if kube.IsNotFound(err) {
			code = spec.ErrUnknownContainer
		}
		return nil, spec.Errorf(code, "cannot read the pod: %v", err)
	}
	if inv.pod.UID != "" && pod.Metadata.UID != "" && pod.Metadata.UID != inv.pod.UID {
		return nil, spec.Errorf(spec.ErrTryAgainLater, "the pod has UID %s, the runtime's sandbox is for UID %s (the pod was re-created)",
			pod.Metadata.UID, inv.pod.UID)
	}
	info := &apiInfo{pod: pod, podRead: time.Since(start)}
	ann := pod.Metadata.Annotations
	if v := strings.TrimSpace(ann[api.DefaultNetworkAnnotation]); v != "" {
		// As in Multus, a bare name is in multusNamespace, where the
		// administrator keeps the cluster network's alternatives.
		r := selection.Parse(v, cfg.MultusNamespace, selection.Options{})
		if r.Fatal() || r.Ignored() || len(r.Selections) != 1 {
			return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "annotation %s=%q must name exactly one NetworkAttachmentDefinition: %v",
				api.DefaultNetworkAnnotation, v, problemsText(r.Problems))
		}
		s := r.Selections[0]
		if s.Namespace != cfg.MultusNamespace { // multusNamespace is always allowed here
			if err := inv.isolation(s); err != nil {
				return nil, err
			}
		}
		info.override = s.Ref()
	}
	res := selection.Parse(ann[api.NetworksAnnotation], pod.Metadata.Namespace,
		selection.Options{DefaultInterface: a.IfName, InterfacePrefix: cfg.InterfacePrefix})
	if err := res.Err(); err != nil {
		return nil, spec.AsError(err, spec.ErrInvalidNetworkConfig)
	}
	inv.reportProblems(ctx, client, pod, res.Problems)
	info.sels = res.Selections
	if !slices.Contains(cfg.SystemNamespaces, pod.Metadata.Namespace) {
		info.defaults = inv.defaultNetworks(info.sels)
	}
	for _, s := range info.sels {
		if err := inv.isolation(s); err != nil {
			return nil, err
		}
	}
	var refs []string
	if info.override != "" {
		refs = append(refs, info.override)
	} else if clusterRef != "" {
		refs = append(refs, clusterRef)
	}
	for _, s := range append(slices.Clone(info.defaults), info.sels...) {
		refs = append(refs, s.Ref())
	}
	if info.lists, err = inv.fetchNADs(ctx, client, refs); err != nil {
		return nil, err
	}
	return info, nil
}

// attachment builds one selected network's attachment: capability args
// (failing for undeclared capabilities), cni-args merged into every plugin,
// the IPAMClaim reference handed on as args.cni.
func (inv *invocation) attachment(s *selection.Selection, list *spec.ConfList) (*Attachment, error) {
	if err := notSelf(list, s.Ref()); err != nil {
		return nil, err
	}
	att := &Attachment{Name: s.Ref(), IfName: s.Interface, CNIArgs: podCNIArgs(inv.rargs)}
	caps, err := selection.CapabilityArgs(s, selection.PluginCapsOf(list))
	if err != nil {
		return nil, spec.AsError(err, spec.ErrUnsupportedField)
	}
	att.CapabilityArgs = caps
	cniArgs := s.CNIArgs
	if s.IPAMClaimReference != "" {
		cniArgs = make(map[string]json.RawMessage, len(s.CNIArgs)+1)
		for k, v := range s.CNIArgs {
			cniArgs[k] = v
		}
		cniArgs[IPAMClaimArg], _ = json.Marshal(s.IPAMClaimReference)
	}
	att.Config, err = selfContained(list, func(b []byte) ([]byte, error) { return selection.MergeCNIArgs(b, cniArgs) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", describe(att), err)
	}
	if s.HasDefaultRoute {
		att.HasDefault = true
		for _, gw := range s.DefaultRoute {
			att.DefaultRoute = append(att.DefaultRoute, gw.String())
		}
	}
	return att, nil
}

func (inv *invocation) isolation(s *selection.Selection) error {
	if !inv.cfg.NamespaceIsolation {
		return nil
	}
	d := selection.CheckNamespaceIsolation(inv.pod.Namespace, inv.cfg.GlobalNamespaces, s)
	if !d.Allowed {
		return spec.Errorf(spec.ErrInvalidNetworkConfig, "%s (multi-net spec §7.4)", d.Message)
	}
	return nil
}

// notSelf refuses a network that runs multinet: the nested multinet would
// read the same pod and delegate to the same network again (without end
// when its cniDir differs, or waiting forever for this container's lock
// when it is the same), so anyone allowed to create a
// NetworkAttachmentDefinition could hang or flood the node.
func notSelf(l *spec.ConfList, name string) error {
	if runsMultinet(l) {
		return spec.Errorf(spec.ErrInvalidNetworkConfig,
			"network %q runs the multinet plugin itself; a delegating plugin cannot be its own delegate", name)
	}
	return nil
}

// clusterNames are the configured cluster network's network names, which
// a network the policy checks may not take.
func clusterNames(onDisk *spec.ConfList, info *apiInfo, cfg *Config) []string {
	if onDisk != nil {
		return []string{onDisk.Name}
	}
	if l := info.lists[qualify(cfg.ClusterNetwork, cfg.MultusNamespace)]; l != nil {
		return []string{l.Name}
	}
	return nil
}

// qualify turns "name" into "ns/name".
func qualify(ref, ns string) string {
	if strings.Contains(ref, "/") {
		return ref
	}
	return ns + "/" + ref
}

// defaultNetworks are the configured networks every pod gets, named after
// the annotation's interfaces (prefix+N, skipping every name in use).
func (inv *invocation) defaultNetworks(sels []*selection.Selection) []*selection.Selection {
	used := map[string]bool{inv.args.IfName: true}
	for _, s := range sels {
		used[s.Interface] = true
	}
	var out []*selection.Selection
	n := 0
	for _, ref := range inv.cfg.DefaultNetworks {
		ns, name, ok := strings.Cut(qualify(ref, inv.cfg.MultusNamespace), "/")
		if !ok {
			continue
		}
		s := &selection.Selection{Index: -1, Namespace: ns, Name: name}
		for {
			n++
			if ifn := fmt.Sprintf("%s%d", inv.cfg.InterfacePrefix, n); !used[ifn] {
				s.Interface, used[ifn] = ifn, true
				break
			}
		}
		out = append(out, s)
	}
	return out
}

// fetchNADs reads each distinct NetworkAttachmentDefinition once, in
// parallel, and resolves its configuration (§3.4.1).
func (inv *invocation) fetchNADs(ctx context.Context, client API, refs []string) (map[string]*spec.ConfList, error) {
	out := map[string]*spec.ConfList{}
	var distinct []string
	for _, r := range refs {
		if _, ok := out[r]; !ok {
			out[r] = nil
			distinct = append(distinct, r)
		}
	}
	if len(distinct) == 0 {
		return out, nil
	}
	if client == nil {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "NetworkAttachmentDefinitions %v are needed but there is no Kubernetes API access", distinct)
	}
	errs := make([]error, len(distinct))
	lists := make([]*spec.ConfList, len(distinct))
	var wg sync.WaitGroup
	run := func(f func()) { go f() } // one GET each, in parallel
	if inv.host.LocalReads {
		run = func(f func()) { f() }
	}
	for i, ref := range distinct {
		wg.Add(1)
		run(func() {
			defer wg.Done()
			ns, name, _ := strings.Cut(ref, "/")
			nad, err := client.GetNAD(ctx, ns, name, true)
			if kube.IsNotFound(err) { // maybe just created: ask etcd
				nad, err = client.GetNAD(ctx, ns, name, false)
			}
			if err != nil {
				code := spec.ErrTryAgainLater
				if kube.IsNotFound(err) {
					code = spec.ErrInvalidNetworkConfig
				}
				errs[i] = spec.Errorf(code, "cannot get NetworkAttachmentDefinition %s: %v", ref, err)
				return
			}
			lists[i], errs[i] = nadConfig(inv.cfg, nad)
		})
	}
	wg.Wait()
	if errs := filterNil(errs); len(errs) > 0 {
		return nil, joinErrors("", errs)
	}
	for i, ref := range distinct {
		out[ref] = lists[i]
	}
	return out, nil
}

func filterNil(errs []error) []error {
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

func problemsText(ps []selection.Problem) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, p.String())
	}
	if len(parts) == 0 {
		return "no usable selection"
	}
	return strings.Join(parts, "; ")
}

// reportProblems logs every non-fatal annotation problem and records one
// Warning event on the pod listing them (the spec's "invalid and ignored"
// would otherwise be silent).
func (inv *invocation) reportProblems(ctx context.Context, client API, pod *kube.Pod, problems []selection.Problem) {
	if len(problems) == 0 {
		return
	}
	reason := "NetworkAnnotationWarning"
	for _, p := range problems {
		inv.log.Warn("network selection annotation problem", "pod", inv.pod.ref(), "severity", p.Severity.String(), "problem", p.String())
		if p.Severity == selection.Ignored {
			reason = "NetworkAnnotationIgnored"
		}
	}
	if client == nil {
		return
	}
	if err := client.CreateEvent(ctx, pod, kube.EventWarning, reason, problemsText(problems), "multinet", eventHost(pod)); err != nil {
		inv.log.Warn("cannot record the event", "pod", inv.pod.ref(), "error", err)
	}
}

// eventHost is an Event's source host: the node name the kubelet uses
// (the pod's spec.nodeName, which honours --hostname-override and which
// `kubectl get events --field-selector source=...` and node views match),
// the machine's hostname only for a pod not bound to a node.
func eventHost(pod *kube.Pod) string {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	host, _ := os.Hostname()
	return host
}

// writeStatus publishes the network-status annotation (§5).
func (inv *invocation) writeStatus(ctx context.Context, pod *kube.Pod, plan *Plan, results []*spec.Result) error {
	value, err := statusValue(plan, results)
	if err != nil {
		return err
	}
	if inv.cfg.AsyncNetworkStatus {
		w := inv.takeWriter()
		if w == nil {
			return nil // not started; logged
		}
		err := w.send(&statusJob{Config: inv.args.StdinData, Namespace: pod.Metadata.Namespace,
			Name: pod.Metadata.Name, UID: pod.Metadata.UID, Value: value, ContainerID: plan.ContainerID})
		if err != nil {
			inv.log.Error("cannot hand the network status to its writer", "pod", inv.pod.ref(), "error", err)
		}
		return nil
	}
	client, err := inv.kube()
	if err != nil {
		return err
	}
	err = client.SetNetworkStatus(ctx, pod.Metadata.Namespace, pod.Metadata.Name, pod.Metadata.UID, value, statusWriteAttempts)
	if err != nil && (kube.IsNotFound(err) || errors.Is(err, kube.ErrPodReplaced)) {
		// The pod is gone: the runtime will DEL this sandbox.
		inv.log.Warn("network status not written: the pod is gone", "pod", inv.pod.ref(), "error", err)
		return nil
	}
	if err != nil {
		return spec.Errorf(spec.ErrTryAgainLater, "cannot write the %s annotation: %v", api.NetworkStatusAnnotation, err)
	}
	return nil
}

// statusValue is the network-status annotation of a plan's attachments
// with their results. It depends on nothing else, so DEL can compute it
// again from the plan and the cached results (see clearStatus).
func statusValue(plan *Plan, results []*spec.Result) (string, error) {
	overridden := slices.ContainsFunc(plan.Attachments, func(a *Attachment) bool { return a.HasDefault })
	entries := make([]status.Entry, 0, len(results))
	for i, att := range plan.Attachments {
		in := status.Input{Name: att.Name, Default: att.Default, Result: results[i], IfName: att.IfName}
		switch {
		case att.HasDefault:
			for _, gw := range att.DefaultRoute {
				if ip, err := netip.ParseAddr(gw); err == nil {
					in.DefaultRoute = append(in.DefaultRoute, ip)
				}
			}
		case att.Default && !overridden:
			in.DefaultRoute = defaultGateways(results[i])
		}
		e, err := status.New(in)
		if err != nil {
			return "", spec.Errorf(spec.ErrInternal, "network status: %v", err)
		}
		entries = append(entries, e)
	}
	value, err := status.Encode(entries)
	if err != nil {
		return "", spec.Errorf(spec.ErrInternal, "network status: %v", err)
	}
	return value, nil
}

// defaultGateways are the gateways of the result's default routes; a
// default route without "gw" goes via its family's IP gateway (what
// host-local and the bridge plugin do with {"dst": "0.0.0.0/0"}).
func defaultGateways(r *spec.Result) []netip.Addr {
	out := status.DefaultGateways(r)
	if r == nil {
		return out
	}
	for _, rt := range r.Routes {
		if rt == nil || rt.Dst.Bits() != 0 || rt.GW.IsValid() {
			continue
		}
		for _, ip := range r.IPs {
			if ip != nil && ip.Gateway.IsValid() && ip.Gateway.Is4() == rt.Dst.Addr().Is4() && !slices.Contains(out, ip.Gateway) {
				out = append(out, ip.Gateway)
				break
			}
		}
	}
	return out
}
