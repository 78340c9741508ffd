package link

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/spec"
)

// LinkWant is what CHECK expects of an interface; zero fields are not
// checked.
type LinkWant struct {
	Type string // netlink's type name: "veth", "macvlan", "ipvlan", "vlan", "dummy", "tuntap", ...
	MAC  string // as in a result: lower-case, colon separated
	MTU  int
	Up   bool
}

// CheckLink looks the interface name up in n and verifies it against w.
// The errors say what differs; callers prefix their plugin's CHECK.
func (n *NS) CheckLink(name string, w LinkWant) (netlink.Link, error) {
	l, err := n.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %q not found in %s: %v", name, n, err)
	}
	at := l.Attrs()
	switch {
	case w.Type != "" && l.Type() != w.Type:
		return nil, fmt.Errorf("interface %q is a %s, not a %s", name, l.Type(), w.Type)
	case w.MAC != "" && at.HardwareAddr.String() != w.MAC:
		return nil, fmt.Errorf("interface %q MAC is %s, prevResult says %s", name, at.HardwareAddr, w.MAC)
	case w.MTU != 0 && at.MTU != w.MTU:
		return nil, fmt.Errorf("interface %q MTU is %d, expected %d", name, at.MTU, w.MTU)
	case w.Up && at.Flags&net.FlagUp == 0:
		return nil, fmt.Errorf("interface %q is down", name)
	}
	return l, nil
}

// FindIface returns the index in res.Interfaces of the interface called
// name in sandbox ("" for the host), or -1. With several, the last one
// counts (as in the reference plugins' CHECK loops).
func FindIface(res *spec.Result, name, sandbox string) int {
	for i := len(res.Interfaces) - 1; i >= 0; i-- {
		if in := res.Interfaces[i]; in.Name == name && in.Sandbox == sandbox {
			return i
		}
	}
	return -1
}

// CheckResult verifies that l has res's addresses for result interface idx
// and that res's routes exist (CheckAddrs, then CheckRoutes).
func (n *NS) CheckResult(l netlink.Link, res *spec.Result, idx int) error {
	if err := n.CheckAddrs(l, res.IPs, idx); err != nil {
		return err
	}
	return n.CheckRoutes(res.Routes)
}

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

// CheckRoutes verifies that each route exists in its table (the main
// table unless the route names one, as 1.1.0 results can) with the same
// destination and, when the route names one, the same gateway.
func (n *NS) CheckRoutes(routes []*spec.Route) error {
	for _, r := range routes {
		fam := Family(r.Dst.Addr())
		filter := &netlink.Route{Dst: IPNet(r.Dst.Masked())}
		mask := netlink.RT_FILTER_DST
		if r.Dst.Bits() == 0 {
			// The kernel reports default routes with no Dst.
			filter, mask = &netlink.Route{}, 0
		}
		if r.Table != nil {
			filter.Table = *r.Table
			mask |= netlink.RT_FILTER_TABLE
		}
		found, err := n.RouteListFiltered(fam, filter, mask)
		if err != nil {
			return fmt.Errorf("list routes to %s: %w", r.Dst, err)
		}
		ok := false
		for _, rt := range found {
			if r.Dst.Bits() == 0 && !IsDefaultDst(rt.Dst) {
				continue
			}
			gw, _ := netip.AddrFromSlice(rt.Gw)
			if !r.GW.IsValid() || gw.Unmap() == r.GW {
				ok = true
				break
			}
		}
		if !ok && r.Table != nil {
			return fmt.Errorf("route to %s via %v not found in table %d", r.Dst, r.GW, *r.Table)
		}
		if !ok {
			return fmt.Errorf("route to %s via %v not found", r.Dst, r.GW)
		}
	}
	return nil
}

// IsDefaultDst reports whether a route destination is a default route (the
// kernel reports those with no Dst; netlink may fill in 0.0.0.0/0 or ::/0).
func IsDefaultDst(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0
}
