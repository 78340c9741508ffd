package plugin

import (
	"fmt"
	"net"

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
		return spec.Errorf(spec.ErrInternal, "multinet: default-route of %s: %v", describe(att), err)
	}
	return nil
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}
