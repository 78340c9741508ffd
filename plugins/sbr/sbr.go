// Package sbr is the source-based routing meta plugin: in a chain after an
// interface plugin, it makes traffic from each of the interface's
// addresses use a routing table of its own (a policy rule "from <address>
// lookup <table>"), moves the interface's routes from the main table there
// and adds a default route through the address's gateway. With "table"
// it only adds the rules, to a table the operator manages. Keys, table
// numbering and rule priorities follow the reference sbr plugin v1.9.1;
// see the package README for the differences.
package sbr

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the sbr plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "sbr",
		Add:    add,
		Del:    del,
		Check:  check,
		Status: func(*skel.CmdArgs) error { return nil }, // nothing to wait for
		// No GC: every rule and route lives in the container's namespace
		// and goes with it.
		About: "patchbay sbr plugin: source-based routing, one routing table per address of the interface",
	}
}

// lock serialises sbr runs on one namespace (the reference locks the
// namespace file the same way, so the two exclude each other too): table
// choice reads what exists and then adds to it.
func lock(n *link.NS) error {
	for {
		err := unix.Flock(n.Fd(), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				return fmt.Errorf("lock %s: %w", n, err)
			}
			return nil
		}
	}
}

// openLocked opens the container namespace (code 3 when gone) and locks it
// until Close.
func openLocked(path string) (*link.NS, error) {
	cont, err := link.OpenContainer(path)
	if err != nil {
		return nil, err
	}
	if err := lock(cont); err != nil {
		cont.Close()
		return nil, err
	}
	return cont, nil
}

// ifaceAddresses are the addresses of prevResult sbr routes by; refused
// when there are none.
func ifaceAddresses(prev *spec.Result, ifName string) ([]*spec.IPConfig, error) {
	if prev == nil {
		return nil, invalid("\"prevResult\" is required: sbr is a chained plugin and must follow an interface plugin")
	}
	ips := addresses(prev, ifName)
	if len(ips) == 0 {
		return nil, invalid("prevResult has no IP address for interface %q: nothing to route by source", ifName)
	}
	return ips, nil
}

func hostNet(a netip.Addr) *net.IPNet {
	return link.IPNet(netip.PrefixFrom(a, a.BitLen()))
}

// reserved reports whether a table is one of the kernel's own.
func reserved(table int) bool {
	return table == 0 || (table >= unix.RT_TABLE_COMPAT && table <= unix.RT_TABLE_LOCAL)
}

// ruleFrom returns the source address of a rule of the shape sbr makes:
// "from <address>/32 (or /128) lookup <table>", no other selector.
func ruleFrom(r netlink.Rule) (netip.Addr, bool) {
	if r.Src == nil || r.Dst != nil || r.Mark != 0 || r.Mask != nil || r.Tos != 0 || r.IifName != "" || r.OifName != "" ||
		r.Invert || r.Dport != nil || r.Sport != nil || r.IPProto != 0 || r.UIDRange != nil || r.Goto > 0 || (r.Type != 0 && r.Type != unix.FR_ACT_TO_TBL) {
		return netip.Addr{}, false
	}
	p := link.Prefix(r.Src)
	if !p.IsValid() || p.Bits() != p.Addr().BitLen() {
		return netip.Addr{}, false
	}
	return p.Addr(), true
}

// tableFor finds the rule sending traffic from a to a table: want (0: any
// table but the kernel's own).
func tableFor(rules []netlink.Rule, a netip.Addr, want int) (int, bool) {
	for _, r := range rules {
		if src, ok := ruleFrom(r); ok && src == a && (want == 0 && !reserved(r.Table) || want != 0 && r.Table == want) {
			return r.Table, true
		}
	}
	return 0, false
}

// ensureRule adds "from a lookup table" unless it is there. No priority
// is given: the kernel puts it just before the first rule after its local
// rule (32765, then 32764, ...), as with the reference.
func ensureRule(cont *link.NS, rules []netlink.Rule, a netip.Addr, table int, undo *link.Undo) error {
	if _, ok := tableFor(rules, a, table); ok {
		return nil
	}
	r := netlink.NewRule()
	r.Src, r.Table = hostNet(a), table
	if err := cont.H.RuleAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add rule from %s lookup %d: %w", a, table, err)
	}
	undo.Push(fmt.Sprintf("delete rule from %s lookup %d", a, table), func() error { return ignoreGone(cont.H.RuleDel(r)) })
	return nil
}

func ignoreGone(err error) error {
	if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// routeDst is a route's destination (the kernel reports default routes
// with none).
func routeDst(r *netlink.Route) netip.Prefix {
	if r.Dst == nil {
		if r.Family == unix.AF_INET6 {
			return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	return link.Prefix(r.Dst).Masked()
}

func routeFamily(r *netlink.Route) int {
	if r.Family != 0 {
		return r.Family
	}
	if r.Dst != nil && r.Dst.IP.To4() == nil {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

func addrFamily(a netip.Addr) int {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// belongs is the reference's test of whether a route of the interface
// goes into address ipc's table: its source or gateway is in ipc's
// subnet, or it has neither (a plain interface route). Here only routes of
// the address's own family qualify (the reference copies gateway-less
// routes of the other family too, where no rule ever looks them up).
func belongs(r *netlink.Route, ipc *spec.IPConfig) bool {
	if routeFamily(r) != addrFamily(ipc.Address.Addr()) {
		return false
	}
	subnet := ipc.Address.Masked()
	src, gw := addrOf(r.Src), addrOf(r.Gw)
	return src.IsValid() && subnet.Contains(src) || gw.IsValid() && subnet.Contains(gw) || !src.IsValid() && !gw.IsValid()
}

// allRoutes lists every route of the namespace, all tables and families.
func allRoutes(cont *link.NS) ([]netlink.Route, error) {
	rs, err := cont.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes in %s: %w", cont, err)
	}
	return rs, nil
}

func add(a *skel.CmdArgs) (res *spec.Result, err error) {
	c, err := load(a)
	if err != nil {
		return nil, err
	}
	ips, err := ifaceAddresses(a.Conf.PrevResult, a.IfName)
	if err != nil {
		return nil, err
	}
	cont, err := openLocked(a.Netns)
	if err != nil {
		return nil, err
	}
	defer cont.Close()
	l, err := cont.FindLink(a.IfName)
	if err != nil {
		return nil, fmt.Errorf("look up %q in %s: %w", a.IfName, cont, err)
	}
	if l == nil {
		return nil, spec.Errorf(spec.ErrInternal, "interface %q not found in %s", a.IfName, cont)
	}
	rules, err := cont.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list rules in %s: %w", cont, err)
	}
	res = a.Conf.PrevResult.Clone()
	var undo link.Undo
	defer undo.Unwind(&err)
	if c.table != 0 {
		for _, ipc := range ips {
			if err = ensureRule(cont, rules, ipc.Address.Addr(), c.table, &undo); err != nil {
				return nil, err
			}
		}
		return res, nil
	}
	routes, err := allRoutes(cont)
	if err != nil {
		return nil, err
	}
	if err = moveRoutes(cont, c, l, ips, rules, routes, res, &undo); err != nil {
		return nil, err
	}
	return res, nil
}

// routeKey identifies a route in a table for "is it there already".
type routeKey struct {
	table int
	dst   netip.Prefix
	gw    netip.Addr
	prio  int
}

func keyOf(r *netlink.Route) routeKey {
	return routeKey{r.Table, routeDst(r), addrOf(r.Gw), r.Priority}
}

// moveRoutes gives each address a table (the first from 100 on that no
// rule and no route uses, the next free one for the next address), a rule
// to it, a default route through its gateway and copies of the
// interface's main-table routes; then takes those out of the main table
// (with addSourceHints, subnet routes stay there, with the address as
// source hint). Routes of res that moved get their table (a 1.1.0 field).
func moveRoutes(cont *link.NS, c *config, l netlink.Link, ips []*spec.IPConfig, rules []netlink.Rule, routes []netlink.Route, res *spec.Result, undo *link.Undo) error {
	idx := l.Attrs().Index
	used := map[int]bool{}
	have := map[routeKey]bool{}
	for _, r := range rules {
		used[r.Table] = true
	}
	var main []netlink.Route // the interface's routes in the main table
	for i := range routes {
		r := &routes[i]
		used[r.Table] = true
		have[keyOf(r)] = true
		if r.Table == unix.RT_TABLE_MAIN && r.LinkIndex == idx {
			main = append(main, *r)
		}
	}
	movedTo := make([]int, len(main)) // the first table each main route went to
	next := firstTable
	for _, ipc := range ips {
		addr := ipc.Address.Addr()
		table, ok := tableFor(rules, addr, 0) // an earlier ADD's
		if !ok {
			for table = next; used[table]; table++ {
			}
			used[table] = true
			next = table + 1
		}
		if err := ensureRule(cont, rules, addr, table, undo); err != nil {
			return err
		}
		put := func(r netlink.Route, what string) error {
			r.Table, r.Flags = table, 0 // flags of a route the kernel made are refused on add
			existed := have[keyOf(&r)]
			if err := cont.H.RouteReplace(&r); err != nil {
				return fmt.Errorf("%s to %s in table %d: %w", what, routeDst(&r), table, err)
			}
			if !existed {
				have[keyOf(&r)] = true
				undo.Push(fmt.Sprintf("delete route to %s from table %d", routeDst(&r), table), func() error { return ignoreGone(cont.H.RouteDel(&r)) })
			}
			return nil
		}
		if gw := c.gateway(ipc); gw.IsValid() {
			if gw.BitLen() != addr.BitLen() {
				return invalid("the gateway %s of %s is of another address family", gw, ipc.Address)
			}
			def := netlink.Route{LinkIndex: idx, Dst: link.IPNet(link.DefaultDst(gw)), Gw: gw.AsSlice()}
			if err := put(def, "add a default route via "+gw.String()); err != nil {
				return err
			}
		}
		staticGW := addr.Is4() && c.gw4.IsValid() || addr.Is6() && c.gw6.IsValid()
		for i := range main {
			// A configured gateway replaces the interface's default route
			// (the reference, after v1.9.1, copies that over it).
			if staticGW && routeDst(&main[i]).Bits() == 0 {
				continue
			}
			if belongs(&main[i], ipc) {
				if err := put(main[i], "copy the route"); err != nil {
					return err
				}
				if movedTo[i] == 0 {
					movedTo[i] = table
				}
			}
		}
	}

	hinted := map[netip.Prefix]bool{}
	if c.addSourceHints {
		for _, ipc := range ips {
			subnet := ipc.Address.Masked()
			hint := netlink.Route{LinkIndex: idx, Dst: link.IPNet(subnet), Src: ipc.Address.Addr().AsSlice(), Table: unix.RT_TABLE_MAIN, Scope: netlink.SCOPE_LINK}
			var old *netlink.Route
			for i := range main {
				if routeDst(&main[i]) == subnet {
					old = &main[i]
					// Replace it in place: same metric (IPv6 routes of
					// different metrics coexist) and origin.
					hint.Priority, hint.Protocol = old.Priority, old.Protocol
					break
				}
			}
			if err := cont.H.RouteReplace(&hint); err != nil {
				return fmt.Errorf("add the route to %s with source hint %s: %w", subnet, ipc.Address.Addr(), err)
			}
			hinted[subnet] = true
			undo.Push("put back the main table's route to "+subnet.String(), func() error {
				if old != nil {
					o := *old
					o.Flags = 0
					return cont.H.RouteReplace(&o)
				}
				return ignoreGone(cont.H.RouteDel(&hint))
			})
		}
	}
	for i := range main {
		r := main[i]
		if c.addSourceHints && (r.Scope == netlink.SCOPE_LINK || hinted[routeDst(&r)]) {
			movedTo[i] = 0 // still in the main table
			continue
		}
		if err := cont.H.RouteDel(&r); err != nil && ignoreGone(err) != nil {
			return fmt.Errorf("delete the route to %s from the main table: %w", routeDst(&r), err)
		}
		undo.Push("put back the main table's route to "+routeDst(&r).String(), func() error {
			r.Flags = 0
			if err := cont.H.RouteAdd(&r); err != nil && !errors.Is(err, unix.EEXIST) {
				return err
			}
			return nil
		})
	}
	for _, rr := range res.Routes {
		for i := range main {
			gw := addrOf(main[i].Gw)
			if movedTo[i] != 0 && routeDst(&main[i]) == rr.Dst.Masked() && (!rr.GW.IsValid() || rr.GW == gw) {
				rr.Table = spec.IntPtr(movedTo[i])
				break
			}
		}
	}
	return nil
}
