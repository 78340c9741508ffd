package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// GCNetworkList garbage-collects a network (spec §3): first every cached
// attachment of the network that is not in valid gets a DEL (with the
// configuration, netns, CNI_ARGS and capability args cached at ADD), then,
// from 1.1.0 on, every plugin gets GC with the valid list under both
// cni.dev/valid-attachments and the older cni.dev/attachments key. Errors do
// not stop it; all of them are returned (errors.Join).
//
// With disableGC nothing happens at all, neither the DELs nor the plugin GC,
// as in libcni: an administrator sets it when the network's state is shared
// with something this runtime cannot see.
func (c *CNI) GCNetworkList(ctx context.Context, list *spec.ConfList, valid []spec.Attachment) error {
	if err := checkList(list); err != nil {
		return err
	}
	if list.DisableGC {
		return nil
	}
	keep := map[spec.Attachment]bool{}
	for _, a := range valid {
		keep[a] = true
	}
	var errs []error
	// Temporaries of killed cache writes; their attachments' DEL removes
	// them too, this catches those no DEL will come for.
	if err := atomicfile.RemoveTemps(c.resultsDir()); err != nil {
		errs = append(errs, fmt.Errorf("network %q: GC: %w", list.Name, err))
	}
	cached, err := c.GetCachedAttachments(list.Name, "")
	if err != nil {
		errs = append(errs, fmt.Errorf("network %q: GC: %w", list.Name, err))
	}
	for _, a := range cached {
		if keep[spec.Attachment{ContainerID: a.ContainerID, IfName: a.IfName}] {
			continue
		}
		if err := c.DelNetworkList(ctx, cachedList(list, a), &RuntimeConf{
			ContainerID: a.ContainerID, NetNS: a.NetNS, IfName: a.IfName,
			Args: a.CNIArgs, CapabilityArgs: a.CapabilityArgs,
		}); err != nil {
			errs = append(errs, fmt.Errorf("network %q: GC: DEL of stale attachment (%s, %s): %w", list.Name, a.ContainerID, a.IfName, err))
		}
	}
	if spec.VerbSupported(list.Version(), spec.CmdGC) {
		if valid == nil {
			valid = []spec.Attachment{} // the key must hold a list, never null
		}
		extra := map[string]any{spec.KeyValidAttachments: valid, spec.KeyOldAttachments: valid}
		for _, p := range list.Plugins {
			if _, err := c.run(ctx, list, p, spec.CmdGC, nil, nil, extra); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// cachedList is the configuration a stale attachment was added with, so its
// DEL undoes what was done even if the file changed since. Only a cached
// configuration marked loadOnlyInlinedPlugins is known to be complete (ours
// always is, see selfContained): libcni caches the file's bytes without the
// plugins it aggregated from <dir>/<network>/, so for such an entry, or an
// unusable one, the current list is used, as libcni's GC does.
func cachedList(cur *spec.ConfList, a *CachedAttachment) *spec.ConfList {
	if len(a.Config) == 0 {
		return cur
	}
	l, err := spec.ParseAny(a.Config)
	if err != nil || l.Name != cur.Name || len(l.Plugins) == 0 || !l.LoadOnlyInlinedPlugins {
		return cur
	}
	return l
}

// StatusNetworkList asks every plugin whether it can serve ADD (STATUS,
// 1.1.0 on; older configurations succeed without running anything). The
// first failure is returned with its code (50/51 are STATUS's own).
func (c *CNI) StatusNetworkList(ctx context.Context, list *spec.ConfList) error {
	if err := checkList(list); err != nil {
		return err
	}
	if !spec.VerbSupported(list.Version(), spec.CmdStatus) {
		return nil
	}
	for _, p := range list.Plugins {
		if _, err := c.run(ctx, list, p, spec.CmdStatus, nil, nil, nil); err != nil {
			return err
		}
	}
	return nil
}
