package sbr

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
)

// del removes the rules from the interface's addresses (those it has now
// and those prevResult gives it) and, for tables sbr picked, the
// interface's routes in them. Nothing to do when the namespace is gone.
func del(a *skel.CmdArgs) error {
	c, err := load(a)
	tableKnown := true
	if err != nil {
		// DEL is best effort: "table" alone decides what goes (the rest
		// does not matter to DEL). Without a readable one, the rules from
		// the interface's addresses go, whatever their table, and no
		// route: the table may be the operator's.
		c, tableKnown = lenientTable(a.StdinData)
		a.Log.Warn("DEL with an invalid configuration", "error", err, "table", c.table, "tableKnown", tableKnown)
	}
	cont, err := link.OpenIfExists(a.Netns)
	if err != nil || cont == nil {
		return err
	}
	defer cont.Close()
	if err := lock(cont); err != nil {
		return err
	}
	srcs := map[netip.Addr]bool{}
	if prev := a.Conf.PrevResult; prev != nil {
		for _, ipc := range addresses(prev, a.IfName) {
			srcs[ipc.Address.Addr()] = true
		}
	}
	l, err := cont.FindLink(a.IfName)
	if err != nil {
		return fmt.Errorf("look up %q in %s: %w", a.IfName, cont, err)
	}
	if l != nil {
		as, err := cont.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("list the addresses of %q: %w", a.IfName, err)
		}
		for _, ad := range as {
			srcs[link.Prefix(ad.IPNet).Addr()] = true
		}
	}
	if len(srcs) == 0 {
		return nil
	}
	rules, err := cont.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list rules in %s: %w", cont, err)
	}
	var errs []error
	tables := map[int]bool{}
	for _, r := range rules {
		src, ok := ruleFrom(r)
		if !ok || !srcs[src] || (c.table != 0 && r.Table != c.table) || (c.table == 0 && reserved(r.Table)) {
			continue
		}
		if err := ignoreGone(cont.H.RuleDel(&r)); err != nil {
			errs = append(errs, fmt.Errorf("delete rule from %s lookup %d: %w", src, r.Table, err))
		}
		tables[r.Table] = true
	}
	// The tables sbr picked hold copies of the interface's routes; a table
	// given as "table" is the operator's, and its routes stay.
	if c.table == 0 && tableKnown && l != nil && len(tables) > 0 {
		routes, err := allRoutes(cont)
		if err != nil {
			return err
		}
		for i := range routes {
			if r := &routes[i]; tables[r.Table] && r.LinkIndex == l.Attrs().Index {
				if err := ignoreGone(cont.H.RouteDel(r)); err != nil {
					errs = append(errs, fmt.Errorf("delete route to %s from table %d: %w", routeDst(r), r.Table, err))
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return nil
}

// check verifies the rule of every address and, for tables sbr picks,
// their default routes, the routes prevResult places in them, and that
// the main table no longer routes through the interface (with
// addSourceHints: only to the addresses' subnets, with the address as
// source hint).
func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	ips, err := ifaceAddresses(a.Conf.PrevResult, a.IfName)
	if err != nil {
		return err
	}
	cont, err := link.OpenContainer(a.Netns)
	if err != nil {
		return err
	}
	defer cont.Close()
	l, err := cont.FindLink(a.IfName)
	if err != nil {
		return fmt.Errorf("look up %q in %s: %w", a.IfName, cont, err)
	}
	if l == nil {
		return skel.CheckErr("interface %q not found in %s", a.IfName, cont)
	}
	idx := l.Attrs().Index
	rules, err := cont.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list rules in %s: %w", cont, err)
	}
	tables := make([]int, len(ips))
	for i, ipc := range ips {
		t, ok := tableFor(rules, ipc.Address.Addr(), c.table)
		if !ok {
			want := "a table of its own"
			if c.table != 0 {
				want = fmt.Sprintf("table %d", c.table)
			}
			return skel.CheckErr("no rule sends traffic from %s to %s", ipc.Address.Addr(), want)
		}
		tables[i] = t
	}
	if c.table != 0 {
		return nil // the table's routes are the operator's
	}
	routes, err := allRoutes(cont)
	if err != nil {
		return err
	}
	find := func(table int, dst netip.Prefix, gw netip.Addr) bool {
		for i := range routes {
			r := &routes[i]
			if r.Table == table && r.LinkIndex == idx && routeDst(r) == dst.Masked() && (!gw.IsValid() || addrOf(r.Gw) == gw) {
				return true
			}
		}
		return false
	}
	for i, ipc := range ips {
		if gw := c.gateway(ipc); gw.IsValid() && !find(tables[i], link.DefaultDst(gw), gw) {
			return skel.CheckErr("table %d (for %s) has no default route via %s dev %s", tables[i], ipc.Address.Addr(), gw, a.IfName)
		}
		if c.addSourceHints {
			subnet := ipc.Address.Masked()
			ok := false
			for j := range routes {
				r := &routes[j]
				ok = ok || r.Table == unix.RT_TABLE_MAIN && r.LinkIndex == idx && routeDst(r) == subnet && addrOf(r.Src) == ipc.Address.Addr()
			}
			if !ok {
				return skel.CheckErr("the main table has no route to %s dev %s src %s (addSourceHints)", subnet, a.IfName, ipc.Address.Addr())
			}
		}
	}
	for _, rr := range a.Conf.PrevResult.Routes {
		if rr.Table != nil && !reserved(*rr.Table) && !find(*rr.Table, rr.Dst, rr.GW) {
			return skel.CheckErr("route to %s is not in table %d, where prevResult places it", rr.Dst, *rr.Table)
		}
	}
	hinted := map[netip.Prefix]bool{}
	for _, ipc := range ips {
		hinted[ipc.Address.Masked()] = c.addSourceHints
	}
	for i := range routes {
		r := &routes[i]
		if r.Table != unix.RT_TABLE_MAIN || r.LinkIndex != idx || hinted[routeDst(r)] || c.addSourceHints && r.Scope == netlink.SCOPE_LINK {
			continue
		}
		return skel.CheckErr("the main table still routes %s through %s", routeDst(r), a.IfName)
	}
	return nil
}
