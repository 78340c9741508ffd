package link

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/spec"
)

// CheckAddrs verifies that every address of ips meant for result interface
// idx (or with no index) is on l, with the same prefix length.
func (n *NS) CheckAddrs(l netlink.Link, ips []*spec.IPConfig, idx int) error {
	addrs, err := n.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses of %q: %w", l.Attrs().Name, err)
	}
	have := map[netip.Prefix]bool{}
	for _, a := range addrs {
		have[Prefix(a.IPNet)] = true
	}
	for _, ipc := range ips {
		if ipc.Interface != nil && *ipc.Interface != idx {
			continue
		}
		if !have[ipc.Address] {
			return fmt.Errorf("interface %q has no address %s", l.Attrs().Name, ipc.Address)
		}
	}
	return nil
}

// CheckRoutes verifies that each route exists in the main table with the
// same destination and, when the route names one, the same gateway.
func (n *NS) CheckRoutes(routes []*spec.Route) error {
	for _, r := range routes {
		fam := Family(r.Dst.Addr())
		filter := &netlink.Route{Dst: IPNet(r.Dst.Masked())}
		mask := netlink.RT_FILTER_DST
		if r.Dst.Bits() == 0 {
			// The kernel reports default routes with no Dst.
			filter, mask = &netlink.Route{}, 0
		}
		found, err := n.RouteListFiltered(fam, filter, mask)
		if err != nil {
			return fmt.Errorf("list routes to %s: %w", r.Dst, err)
		}
		ok := false
		for _, rt := range found {
			if r.Dst.Bits() == 0 && rt.Dst != nil && Prefix(rt.Dst).Bits() != 0 {
				continue
			}
			gw, _ := netip.AddrFromSlice(rt.Gw)
			if !r.GW.IsValid() || gw.Unmap() == r.GW {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("route to %s via %v not found", r.Dst, r.GW)
		}
	}
	return nil
}
