package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// cmdDel tears down every attachment of the container's plan, in reverse
// order, each even when another fails (§7.2), without the apiserver. With
// no usable plan (never added, already deleted, or a corrupt file) it does
// what it can from the delegates' result cache and the cluster network's
// on-disk configuration, and succeeds.
func (inv *invocation) cmdDel() error {
	a, ctx := inv.args, inv.ctx()
	lock, err := inv.lockContainer(ctx)
	if err != nil {
		return err
	}
	plan, perr := readPlan(inv.cfg.CNIDir, a.ContainerID)
	if perr != nil || plan == nil {
		if perr != nil {
			inv.log.Warn("DEL: the cache is unusable, deleting what can be found", "container", a.ContainerID, "error", perr)
		}
		inv.summary.attrs = append(inv.summary.attrs, "plan", "none")
		inv.delFallback(ctx, nil)
		removePlan(inv.cfg.CNIDir, a.ContainerID)
		lock.unlock(true)
		return nil
	}
	results := inv.cachedResults(plan)
	inv.summary = verbSummary{atts: plan.Attachments, results: results}
	cleared := inv.clearStatus(ctx, plan, results)
	err = inv.delPlan(ctx, plan)
	cleared()
	if err != nil {
		lock.unlock(false)
		return err
	}
	removePlan(inv.cfg.CNIDir, a.ContainerID)
	lock.unlock(true)
	return nil
}

// cachedResults are the delegates' cached results of the plan's
// attachments (nil where there is none: that ADD did not complete). They
// are read only when something uses them: the status removal, or the
// verb's log line.
func (inv *invocation) cachedResults(plan *Plan) []*spec.Result {
	needed := plan.PodName != "" && plan.PodNamespace != "" && plan.PodUID != "" ||
		inv.log.Enabled(context.Background(), slog.LevelInfo)
	if !needed {
		return nil
	}
	results := make([]*spec.Result, len(plan.Attachments))
	for i, att := range plan.Attachments {
		if list, err := att.List(); err == nil {
			results[i], _ = inv.cni.GetCachedResult(list, inv.rt(att))
		}
	}
	return results
}

// statusClearTimeout bounds DEL's wait for the status clear: an
// unreachable apiserver must not hold up the teardown.
const statusClearTimeout = 2 * time.Second

// clearStatus removes the network-status annotation this container's ADD
// wrote (as Multus does on DEL), so that the pod does not advertise
// addresses it no longer has: consumers of the annotation (IPAM
// reconcilers, monitoring) would take them as in use. The value ADD wrote
// is recomputed from the plan and the cached results (read here, before
// the delegates' DEL removes them) and the removal is conditional on it
// and on the pod's UID (kube.ClearNetworkStatus), so a newer sandbox's
// status or a re-created pod is never touched. It runs while the
// delegates are deleted; the returned function waits for it (at most
// statusClearTimeout). Failures are only logged: DEL never fails on them.
// results are cachedResults(plan).
func (inv *invocation) clearStatus(ctx context.Context, plan *Plan, results []*spec.Result) func() {
	if plan.PodName == "" || plan.PodNamespace == "" || plan.PodUID == "" || len(results) != len(plan.Attachments) {
		return func() {}
	}
	if slices.Contains(results, nil) {
		return func() {} // ADD did not complete: it wrote no status
	}
	value, err := statusValue(plan, results)
	if err != nil {
		return func() {}
	}
	ref := plan.PodNamespace + "/" + plan.PodName
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(ctx, statusClearTimeout)
		defer cancel()
		client, err := inv.kube()
		var cleared bool
		if err == nil {
			cleared, err = client.ClearNetworkStatus(ctx, plan.PodNamespace, plan.PodName, plan.PodUID, value)
		}
		if err != nil {
			inv.log.Warn("DEL: the network status annotation was not removed", "pod", ref, "error", err)
			return
		}
		inv.log.Debug("DEL: network status annotation", "pod", ref, "removed", cleared)
	}()
	return func() {
		select {
		case <-done:
		case <-time.After(statusClearTimeout):
		}
	}
}

// delPlan DELs the plan's attachments in reverse; one aggregated error.
func (inv *invocation) delPlan(ctx context.Context, plan *Plan) error {
	var errs []error
	var broken []*Attachment
	for i := len(plan.Attachments) - 1; i >= 0; i-- {
		att := plan.Attachments[i]
		list, err := att.List()
		if err != nil {
			inv.log.Warn("DEL: cached configuration unusable", "attachment", describe(att), "error", err)
			broken = append(broken, att)
			continue
		}
		rt := inv.rt(att)
		if rt.NetNS == "" {
			rt.NetNS = plan.NetNS
		}
		err = inv.cni.DelNetworkList(ctx, list, rt)
		inv.observe(spec.CmdDel, att, err)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", describe(att), err))
		}
	}
	if len(broken) > 0 {
		inv.delFallback(ctx, broken)
	}
	if len(errs) > 0 {
		return joinErrors(fmt.Sprintf("%d attachment(s) could not be deleted: ", len(errs)), errs)
	}
	return nil
}

// delFallback DELs what the delegates' result cache knows of this
// container (only), or of the given attachments' interfaces, and the
// cluster network on CNI_IFNAME when nothing cached covers it. Failures are
// logged: there is nothing better to do.
func (inv *invocation) delFallback(ctx context.Context, only []*Attachment) {
	a := inv.args
	cached, err := inv.cni.GetCachedAttachments("", a.ContainerID)
	if err != nil {
		inv.log.Warn("DEL: some result cache files are unusable", "error", err)
	}
	coveredDefault := false
	for _, c := range cached {
		if only != nil && !slices.ContainsFunc(only, func(x *Attachment) bool { return x.IfName == c.IfName }) {
			continue
		}
		l, err := spec.ParseAny(c.Config)
		if err != nil {
			inv.log.Warn("DEL: cached configuration unusable", "file", c.File, "error", err)
			continue
		}
		coveredDefault = coveredDefault || c.IfName == a.IfName
		args := inv.rargs
		if c.CNIArgs != nil { // what ADD passed
			args = c.CNIArgs
		}
		rt := &runtime.RuntimeConf{ContainerID: a.ContainerID, NetNS: a.Netns, IfName: c.IfName, Args: args, CapabilityArgs: c.CapabilityArgs}
		if err := inv.cni.DelNetworkList(ctx, l, rt); err != nil {
			inv.log.Warn("DEL (from the result cache) failed", "network", l.Name, "ifname", c.IfName, "error", err)
		}
	}
	if only != nil || coveredDefault {
		return
	}
	l, onDisk, err := clusterFromDisk(inv.cfg)
	if !onDisk || err != nil {
		inv.log.Warn("DEL: the cluster network cannot be resolved from disk; not deleted", "clusterNetwork", inv.cfg.ClusterNetwork, "error", err)
		return
	}
	rt := &runtime.RuntimeConf{ContainerID: a.ContainerID, NetNS: a.Netns, IfName: a.IfName, Args: inv.rargs}
	if err := inv.cni.DelNetworkList(ctx, l, rt); err != nil {
		inv.log.Warn("DEL of the cluster network failed", "network", l.Name, "error", err)
	}
}

// cmdCheck runs CHECK through every attachment's delegates.
func (inv *invocation) cmdCheck() error {
	a, ctx := inv.args, inv.ctx()
	lock, err := inv.lockContainer(ctx)
	if err != nil {
		return err
	}
	defer lock.unlock(false)
	plan, err := readPlan(inv.cfg.CNIDir, a.ContainerID)
	if err != nil {
		return spec.Errorf(spec.ErrIOFailure, "%v", err)
	}
	if plan == nil {
		return spec.Errorf(spec.ErrUnknownContainer, "container %s has no attachments (never added, or deleted)", a.ContainerID)
	}
	inv.summary = verbSummary{atts: plan.Attachments, results: inv.cachedResults(plan)}
	var errs []error
	for _, att := range plan.Attachments {
		list, err := att.List()
		if err == nil {
			err = inv.cni.CheckNetworkList(ctx, list, inv.rt(att))
		}
		inv.observe(spec.CmdCheck, att, err)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", describe(att), err))
		}
	}
	return joinErrors("", errs)
}

// networkSet collects distinct networks (by name) with their valid
// attachments, for GC and STATUS.
type networkSet struct {
	order []string
	lists map[string]*spec.ConfList
	valid map[string][]spec.Attachment
}

func (s *networkSet) add(l *spec.ConfList, att *spec.Attachment) {
	if s.lists == nil {
		s.lists, s.valid = map[string]*spec.ConfList{}, map[string][]spec.Attachment{}
	}
	if _, ok := s.lists[l.Name]; !ok {
		s.lists[l.Name] = l
		s.order = append(s.order, l.Name)
		s.valid[l.Name] = []spec.Attachment{}
	}
	if att != nil {
		s.valid[l.Name] = append(s.valid[l.Name], *att)
	}
}

// cmdGC: containers whose plan is not among the valid attachments are
// DELeted; then every delegate network (the cluster network, every
// network of a live plan and every network in the result cache) gets GC
// with the attachments the live plans hold on it.
func (inv *invocation) cmdGC() error {
	a, ctx := inv.args, inv.ctx()
	valid := map[string]bool{}
	for _, at := range a.Conf.Attachments() {
		valid[at.ContainerID] = true
	}
	ids, err := listPlans(inv.cfg.CNIDir)
	if err != nil {
		return spec.Errorf(spec.ErrIOFailure, "%v", err)
	}
	var errs []error
	var nets networkSet
	var deleted []string
	for _, id := range ids {
		if spec.ValidateContainerID(id) != nil {
			continue
		}
		sub := *a
		sub.ContainerID = id
		subInv := *inv
		subInv.args = &sub
		lock, err := lockContainer(ctx, inv.cfg.CNIDir, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		plan, perr := readPlan(inv.cfg.CNIDir, id)
		if plan != nil {
			sub.Netns, sub.IfName = plan.NetNS, ""
			subInv.rargs = plan.CNIArgs
		}
		if !valid[id] {
			switch {
			case plan != nil:
				err = subInv.delPlan(ctx, plan)
			case perr != nil:
				subInv.delFallback(ctx, nil)
			}
			if err == nil {
				removePlan(inv.cfg.CNIDir, id)
				lock.unlock(true)
				deleted = append(deleted, id)
			} else {
				errs = append(errs, fmt.Errorf("DEL of stale container %s: %w", id, err))
				lock.unlock(false)
			}
			continue
		}
		lock.unlock(false)
		if plan == nil {
			continue
		}
		for _, att := range plan.Attachments {
			if l, err := att.List(); err == nil {
				nets.add(l, &spec.Attachment{ContainerID: id, IfName: att.IfName})
			}
		}
	}
	if l, onDisk, err := clusterFromDisk(inv.cfg); onDisk && err == nil {
		nets.add(l, nil)
	}
	cached, err := inv.cni.GetCachedAttachments("", "")
	if err != nil {
		inv.log.Warn("GC: unusable result cache files", "error", err)
	}
	for _, c := range cached {
		if l, err := spec.ParseAny(c.Config); err == nil {
			nets.add(l, nil)
		}
	}
	inv.summary.attrs = []any{"deleted", strings.Join(deleted, ","), "networks", strings.Join(nets.order, ",")}
	for _, name := range nets.order {
		if err := inv.cni.GCNetworkList(ctx, nets.lists[name], nets.valid[name]); err != nil {
			errs = append(errs, err)
		}
	}
	return joinErrors("", errs)
}

// cmdStatus: not ready without the readiness indicator file (code 50);
// otherwise STATUS of the cluster network and every network of the
// cached plans, the first failure returned.
func (inv *invocation) cmdStatus() error {
	ctx := inv.ctx()
	if f := inv.cfg.ReadinessIndicatorFile; f != "" {
		if _, err := os.Stat(f); err != nil {
			return spec.Errorf(spec.ErrPluginNotAvailable, "the cluster network is not ready: readiness indicator file %s: %v", f, err)
		}
	}
	var nets networkSet
	l, onDisk, err := clusterFromDisk(inv.cfg)
	switch {
	case onDisk && err != nil:
		return spec.Errorf(spec.ErrPluginNotAvailable, "the cluster network is not available: %v", err)
	case onDisk:
		nets.add(l, nil)
	}
	ids, _ := listPlans(inv.cfg.CNIDir)
	for _, id := range ids {
		plan, err := readPlan(inv.cfg.CNIDir, id)
		if err != nil || plan == nil {
			continue
		}
		for _, att := range plan.Attachments {
			if l, err := att.List(); err == nil {
				nets.add(l, nil)
			}
		}
	}
	inv.summary.attrs = []any{"networks", strings.Join(nets.order, ",")}
	for _, name := range nets.order {
		if err := inv.cni.StatusNetworkList(ctx, nets.lists[name]); err != nil {
			var pe *runtime.PluginError
			if errors.As(err, &pe) {
				return err
			}
			return spec.AsError(err, spec.ErrPluginNotAvailable)
		}
	}
	return nil
}
