package link

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

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
//
// A result older than 1.1.0 cannot say which table a route is in: there,
// a route missing from the main table is also looked for in the tables
// that policy rules "from <address>" send the interface's own addresses
// to, where a later plugin of the chain (sbr) moved it. A 1.1.0 result
// says where each route is (sbr writes the table it moved a route to), so
// it is checked exactly there.
func (n *NS) CheckResult(l netlink.Link, res *spec.Result, idx int) error {
	if err := n.CheckAddrs(l, res.IPs, idx); err != nil {
		return err
	}
	var sourceTables func() ([]int, error)
	if res.CNIVersion != "" && spec.Compare(res.CNIVersion, spec.V110) < 0 {
		sourceTables = func() ([]int, error) { return n.sourceTables(res.IPs, idx) }
	}
	return n.checkRoutes(res.Routes, sourceTables)
}

// sourceTables lists the tables that rules send traffic from the
// addresses of ips for interface idx to (rules selecting by that source
// address alone).
func (n *NS) sourceTables(ips []*spec.IPConfig, idx int) ([]int, error) {
	srcs := map[netip.Addr]bool{}
	for _, ipc := range ips {
		if ipc.Interface == nil || *ipc.Interface == idx {
			srcs[ipc.Address.Addr()] = true
		}
	}
	rules, err := n.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	var tables []int
	for _, r := range rules {
		if r.Src == nil || r.Dst != nil || r.Mark != 0 || r.IifName != "" || r.OifName != "" || r.Invert || r.Table == unix.RT_TABLE_MAIN {
			continue
		}
		if p := Prefix(r.Src); p.Bits() == p.Addr().BitLen() && srcs[p.Addr()] {
			tables = append(tables, r.Table)
		}
	}
	return tables, nil
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
// table when the route names none) with the same destination and, when
// the route names one, the same gateway.
func (n *NS) CheckRoutes(routes []*spec.Route) error {
	return n.checkRoutes(routes, nil)
}

// checkRoutes is CheckRoutes; a route that names no table and is not in
// the main table may also be in one of the tables alt lists.
func (n *NS) checkRoutes(routes []*spec.Route, alt func() ([]int, error)) error {
	var altTables []int
	altRead := false
	for _, r := range routes {
		table := unix.RT_TABLE_MAIN
		if r.Table != nil {
			table = *r.Table
		}
		ok, err := n.hasRoute(r, table)
		if err != nil {
			return err
		}
		if !ok && r.Table == nil && alt != nil {
			if !altRead {
				if altTables, err = alt(); err != nil {
					return err
				}
				altRead = true
			}
			for _, t := range altTables {
				if ok, err = n.hasRoute(r, t); ok || err != nil {
					break
				}
			}
			if err != nil {
				return err
			}
		}
		if !ok {
			if r.Table != nil {
				return fmt.Errorf("route to %s via %v not found in table %d", r.Dst, r.GW, table)
			}
			return fmt.Errorf("route to %s via %v not found", r.Dst, r.GW)
		}
	}
	return nil
}

// hasRoute reports whether table holds a route to r.Dst (via r.GW, when it
// names one).
func (n *NS) hasRoute(r *spec.Route, table int) (bool, error) {
	fam := Family(r.Dst.Addr())
	filter := &netlink.Route{Dst: IPNet(r.Dst.Masked()), Table: table}
	mask := netlink.RT_FILTER_DST | netlink.RT_FILTER_TABLE
	if r.Dst.Bits() == 0 {
		// The kernel reports default routes with no Dst.
		filter, mask = &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE
	}
	found, err := n.RouteListFiltered(fam, filter, mask)
	if err != nil {
		return false, fmt.Errorf("list routes to %s: %w", r.Dst, err)
	}
	for _, rt := range found {
		if r.Dst.Bits() == 0 && !IsDefaultDst(rt.Dst) {
			continue
		}
		gw, _ := netip.AddrFromSlice(rt.Gw)
		if !r.GW.IsValid() || gw.Unmap() == r.GW {
			return true, nil
		}
	}
	return false, nil
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
