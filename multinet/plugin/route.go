package plugin

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/netns"
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
	err := netns.Do(inv.args.Netns, func() error {
		h, err := netlink.NewHandle(netlink.FAMILY_V4, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		defer h.Close()
		link, err := h.LinkByName(att.IfName)
		if err != nil {
			return fmt.Errorf("interface %s: %w", att.IfName, err)
		}
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			routes, err := h.RouteListFiltered(fam, &netlink.Route{Table: 254}, netlink.RT_FILTER_TABLE)
			if err != nil {
				return err
			}
			for _, r := range routes {
				if r.Dst == nil || isDefault(r.Dst) {
					r := r
					if err := h.RouteDel(&r); err != nil {
						return fmt.Errorf("removing default route %v: %w", r, err)
					}
				}
			}
		}
		for i, gw := range att.DefaultRoute {
			ip := net.ParseIP(gw)
			r := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: ip, Priority: i}
			if ip.To4() == nil {
				r.Dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
			} else {
				r.Dst = &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
			}
			if err := h.RouteAdd(r); err != nil {
				return fmt.Errorf("adding default route via %s dev %s: %w", gw, att.IfName, err)
			}
		}
		return nil
	})
	if err != nil {
		return spec.Errorf(spec.ErrInternal, "default-route of %s: %v", describe(att), err)
	}
	return nil
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
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
			dst := netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			if ip.Is4() {
				dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			}
			r.Routes = append(r.Routes, &spec.Route{Dst: dst, GW: ip})
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
