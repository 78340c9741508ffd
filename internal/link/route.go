package link

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/spec"
)

// AddResultRoutes adds res.Routes through l; a route without a gateway
// uses the first gateway of its family among the IPs of interface idx.
func (n *NS) AddResultRoutes(l netlink.Link, res *spec.Result, idx int) error {
	var gw4, gw6 netip.Addr
	for _, ipc := range res.IPs {
		if ipc.Interface == nil || *ipc.Interface != idx || !ipc.Gateway.IsValid() {
			continue
		}
		if ipc.Gateway.Is4() && !gw4.IsValid() {
			gw4 = ipc.Gateway
		} else if ipc.Gateway.Is6() && !gw6.IsValid() {
			gw6 = ipc.Gateway
		}
	}
	for _, r := range res.Routes {
		gw := r.GW
		if !gw.IsValid() {
			if r.Dst.Addr().Is4() {
				gw = gw4
			} else {
				gw = gw6
			}
		}
		if err := n.AddRoute(l, r, gw); err != nil {
			return err
		}
	}
	return nil
}

// AddRoute adds one result route through link l, via gw when valid.
func (n *NS) AddRoute(l netlink.Link, r *spec.Route, gw netip.Addr) error {
	rt := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: IPNet(r.Dst.Masked()), Priority: r.Priority, MTU: r.MTU, AdvMSS: r.AdvMSS}
	if gw.IsValid() {
		rt.Gw = gw.AsSlice()
	}
	if r.Table != nil {
		rt.Table = *r.Table
	}
	if r.Scope != nil {
		rt.Scope = netlink.Scope(*r.Scope)
	}
	if err := n.H.RouteAddEcmp(rt); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add route %s via %v dev %s: %w", r.Dst, gw, l.Attrs().Name, err)
	}
	return nil
}

// DefaultDst is the default route's destination in a's family (0.0.0.0/0
// or ::/0).
func DefaultDst(a netip.Addr) netip.Prefix {
	if a.Unmap().Is4() {
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
}

// DefaultRouteLink returns the link of n's default route (macvlan's
// default master): the first IPv4 default route of the main table, else
// the first IPv6 one, in the kernel's order (lowest metric first). A
// multipath route counts through its first next hop. One route dump.
func (n *NS) DefaultRouteLink() (netlink.Link, error) {
	routes, err := n.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes in %s: %w", n, err)
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		for _, r := range routes {
			if r.Family != fam || r.Type != unix.RTN_UNICAST || !IsDefaultDst(r.Dst) {
				continue
			}
			idx := r.LinkIndex
			if idx == 0 && len(r.MultiPath) > 0 {
				idx = r.MultiPath[0].LinkIndex
			}
			if idx == 0 {
				continue
			}
			l, err := n.LinkByIndex(idx)
			if err != nil {
				return nil, fmt.Errorf("link %d of the default route in %s: %w", idx, n, err)
			}
			return l, nil
		}
	}
	return nil, errors.New("no default route in " + n.String())
}
