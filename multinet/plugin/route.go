package plugin

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/spec"
)

// applyDefaultRoute implements "default-route" (§4.1.2.1.9): when one
// attachment sets it, every default route in the pod (the cluster network's
// included) is removed and one default route per listed gateway is added on
// that attachment's interface, the first gateway of each family preferred
// (lowest metric). An empty list leaves the pod without a default route.
func (inv *invocation) applyDefaultRoute(plan *Plan, _ []*spec.Result) error {
	var att *Attachment
	for _, a := range plan.Attachments {
		if a.HasDefault {
			att = a
		}
	}
	if att == nil {
		return nil
	}
	if err := replaceDefaultRoutes(inv.args.Netns, att.IfName, att.DefaultRoute); err != nil {
		return spec.Errorf(spec.ErrInternal, "default-route of %s: %v", describe(att), err)
	}
	return nil
}

// replaceDefaultRoutes removes every main-table default route in the
// namespace at nsPath and adds one through ifName per gateway, the first
// of each family with the lowest metric.
func replaceDefaultRoutes(nsPath, ifName string, gateways []string) error {
	pod, err := link.Open(nsPath)
	if err != nil {
		return err
	}
	defer pod.Close()
	l, err := pod.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ifName, err)
	}
	routes, err := pod.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return err
	}
	for _, r := range routes {
		if link.IsDefaultDst(r.Dst) {
			if err := pod.H.RouteDel(&r); err != nil {
				return fmt.Errorf("removing default route %v: %w", r, err)
			}
		}
	}
	for i, gw := range gateways {
		ip, err := netip.ParseAddr(gw) // from the selection's parsed addresses
		if err != nil {
			return fmt.Errorf("gateway %q: %w", gw, err)
		}
		ip = ip.Unmap()
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: link.IPNet(link.DefaultDst(ip)), Gw: ip.AsSlice(), Priority: i}
		if err := pod.H.RouteAdd(r); err != nil {
			return fmt.Errorf("adding default route via %s dev %s: %w", gw, ifName, err)
		}
	}
	return nil
}

// routeResults makes the results say what applyDefaultRoute did, as
// §4.1.2.1.9 puts it ("the default route and gateway will be cleared from
// the cluster-wide default network attachment"): every attachment's result
// loses its default routes, and the attachment with "default-route" gets
// one per listed gateway. The runtime receives the cluster network's result
// (so a plugin chained after multinet, or a runtime reading routes, sees the
// pod's real routes), and the delegates' cached results are rewritten the
// same way, since CHECK verifies the cached routes (as Multus does too).
func (inv *invocation) routeResults(plan *Plan, results []*spec.Result) {
	if !slices.ContainsFunc(plan.Attachments, func(a *Attachment) bool { return a.HasDefault }) {
		return
	}
	for i, att := range plan.Attachments {
		r := results[i]
		if r == nil {
			continue
		}
		before := len(r.Routes)
		r.Routes = slices.DeleteFunc(r.Routes, func(rt *spec.Route) bool { return rt == nil || rt.Dst.Bits() == 0 })
		if !att.HasDefault && len(r.Routes) == before {
			continue
		}
		for _, gw := range att.DefaultRoute {
			ip, err := netip.ParseAddr(gw)
			if err != nil {
				continue
			}
			r.Routes = append(r.Routes, &spec.Route{Dst: link.DefaultDst(ip), GW: ip})
		}
		if err := inv.rewriteCachedResult(att, r); err != nil {
			inv.log.Warn("default-route: the cached result keeps the old routes (CHECK may fail)", "attachment", describe(att), "error", err)
		}
	}
}

// rewriteCachedResult replaces the result of the attachment's entry in the
// delegates' result cache, keeping everything else ADD recorded.
func (inv *invocation) rewriteCachedResult(att *Attachment, r *spec.Result) error {
	list, err := att.List()
	if err != nil {
		return err
	}
	return inv.cni.UpdateCachedResult(list, inv.rt(att), r)
}
