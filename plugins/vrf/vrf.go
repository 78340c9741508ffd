// Package vrf is the vrf meta plugin: chained after an interface plugin, it
// puts the container interface into a VRF (a layer-3 master device with
// its own routing table) inside the container, creating the VRF on first
// use, and moves the interface's routes into the VRF's table. Several
// interfaces can share a VRF; DEL removes the VRF with its last interface.
package vrf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Config is the vrf plugin's configuration (the reference's keys).
type Config struct {
	spec.NetConf
	VRFName string `json:"vrfname"`
	// Table is the VRF's routing table; 0 picks the lowest one no other
	// VRF of the namespace uses. Wider than uint32 so that a bad value is
	// refused by name, not by the decoder.
	Table int64 `json:"table"`
}

// Plugin returns the vrf plugin. Like the reference it needs a chain
// (prevResult), which spec versions before 0.3.0 do not have.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:     "vrf",
		Add:      add,
		Del:      del,
		Check:    check,
		Status:   func(*skel.CmdArgs) error { return nil },
		GC:       func(*skel.CmdArgs) error { return nil }, // all its state is in the container's namespace
		Versions: []string{spec.V030, spec.V031, spec.V040, spec.V100, spec.V110},
		About:    "patchbay vrf plugin: puts the container interface into a VRF",
	}
}

func invalid(format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, format, a...)
}

func decode(a *skel.CmdArgs) (*Config, error) {
	c := &Config{}
	if err := a.DecodeConf(c); err != nil {
		return nil, err
	}
	return c, nil
}

// load validates before anything is looked at (code 7 naming the key).
func load(a *skel.CmdArgs) (*Config, error) {
	c, err := decode(a)
	if err != nil {
		return nil, err
	}
	if c.VRFName == "" {
		return nil, invalid("\"vrfname\" is required")
	}
	if err := spec.ValidateInterfaceName(c.VRFName); err != nil {
		return nil, invalid("\"vrfname\" value %q is invalid: not a usable interface name", c.VRFName)
	}
	switch {
	case c.Table < 0 || c.Table > 1<<32-1:
		return nil, invalid("\"table\" value %d is invalid: must be between 1 and 4294967295 (0: pick a free one)", c.Table)
	case c.Table >= unix.RT_TABLE_DEFAULT && c.Table <= unix.RT_TABLE_LOCAL:
		return nil, invalid("\"table\" value %d is invalid: 253, 254 and 255 are the kernel's default, main and local tables", c.Table)
	}
	return c, nil
}

func add(a *skel.CmdArgs) (res *spec.Result, err error) {
	c, err := load(a)
	if err != nil {
		return nil, err
	}
	prev := a.Conf.PrevResult
	if prev == nil {
		return nil, invalid("vrf needs \"prevResult\": chain it after the plugin that makes the interface")
	}
	cont, err := link.OpenContainer(a.Netns)
	if err != nil {
		return nil, err
	}
	defer cont.Close()
	l, err := cont.FindLink(a.IfName)
	if err == nil && l == nil {
		err = fmt.Errorf("interface %q not found in %s", a.IfName, cont)
	}
	if err != nil {
		return nil, err
	}

	var undo link.Undo
	defer undo.Unwind(&err)
	vrf, created, err := ensureVRF(cont, c)
	if err != nil {
		return nil, err
	}
	if created {
		undo.Push("delete vrf "+vrf.Name, func() error { return delIfEmpty(cont, vrf) })
	}
	var moved []netlink.Route
	switch master := l.Attrs().MasterIndex; master {
	case vrf.Index: // already in it (a repeated ADD)
	case 0:
		kept, err := enslave(cont, l, vrf)
		if err != nil {
			return nil, err
		}
		moved = kept.routes
		undo.Push("take "+a.IfName+" out of "+vrf.Name, func() error { return kept.release(cont, l) })
	default:
		name := fmt.Sprint(master)
		if m, _ := cont.LinkByIndex(master); m != nil {
			name = m.Attrs().Name
		}
		return nil, fmt.Errorf("interface %q already has a master: %s", a.IfName, name)
	}
	return annotate(prev.Clone(), moved, int(vrf.Table)), nil
}

// ensureVRF returns the configured VRF, creating it (up) if needed, and
// whether this call created it. An existing one must be a VRF and, when
// the config names a table, use it.
func ensureVRF(cont *link.NS, c *Config) (*netlink.Vrf, bool, error) {
	l, err := cont.FindLink(c.VRFName)
	if err != nil {
		return nil, false, err
	}
	if l != nil {
		v, ok := l.(*netlink.Vrf)
		switch {
		case !ok:
			return nil, false, fmt.Errorf("%q exists in %s and is a %s, not a vrf", c.VRFName, cont, l.Type())
		case c.Table != 0 && int64(v.Table) != c.Table:
			return nil, false, invalid("vrf %q exists with table %d, \"table\" says %d", c.VRFName, v.Table, c.Table)
		}
		if v.Flags&net.FlagUp == 0 {
			if err := cont.H.LinkSetUp(v); err != nil {
				return nil, false, fmt.Errorf("set vrf %q up: %w", c.VRFName, err)
			}
		}
		return v, false, nil
	}
	table := uint32(c.Table)
	if table == 0 {
		if table, err = freeTable(cont); err != nil {
			return nil, false, err
		}
	}
	attrs := netlink.NewLinkAttrs() // the kernel's default queue length, as `ip link add` leaves it
	attrs.Name = c.VRFName
	v := &netlink.Vrf{LinkAttrs: attrs, Table: table}
	if err := cont.H.LinkAdd(v); err != nil {
		if errors.Is(err, unix.EEXIST) { // made meanwhile (a concurrent ADD): use it
			return ensureVRF(cont, c)
		}
		return nil, false, fmt.Errorf("create vrf %q (table %d) in %s: %w", c.VRFName, table, cont, err)
	}
	nv, err := cont.LinkByName(c.VRFName)
	if err == nil {
		err = cont.H.LinkSetUp(nv)
	}
	if err != nil {
		cont.H.LinkDel(v)
		return nil, false, fmt.Errorf("set vrf %q up: %w", c.VRFName, err)
	}
	return nv.(*netlink.Vrf), true, nil
}

// freeTable is the lowest table no VRF of the namespace uses, skipping
// the kernel's own (253-255), as the reference picks.
func freeTable(cont *link.NS) (uint32, error) {
	links, err := cont.LinkList()
	if err != nil {
		return 0, err
	}
	used := map[uint32]bool{unix.RT_TABLE_DEFAULT: true, unix.RT_TABLE_MAIN: true, unix.RT_TABLE_LOCAL: true}
	for _, l := range links {
		if v, ok := l.(*netlink.Vrf); ok {
			used[v.Table] = true
		}
	}
	for t := uint32(1); t != 0; t++ {
		if !used[t] {
			return t, nil
		}
	}
	return 0, errors.New("no free routing table for a vrf")
}

// kept is what enslaving an interface drops and the plugin puts back.
type kept struct {
	addrs  []netlink.Addr  // global IPv6 addresses
	routes []netlink.Route // routes through the interface (main table)
	table  int             // the table they came from
}

// enslave puts l into vrf. The kernel takes the interface down and up
// again: its routes go (the connected ones come back in the VRF's table
// by themselves) and so do its IPv6 addresses unless keep_addr_on_down is
// set. The reference re-adds both, and so does this: the addresses as they
// were (without duplicate address detection, which they had passed: so no
// wait), then the routes in the VRF's table.
func enslave(cont *link.NS, l netlink.Link, vrf *netlink.Vrf) (*kept, error) {
	k, err := save(cont, l)
	if err != nil {
		return nil, err
	}
	if err := cont.H.LinkSetMasterByIndex(l, vrf.Index); err != nil {
		return nil, fmt.Errorf("put %q into vrf %q: %w", l.Attrs().Name, vrf.Name, err)
	}
	if err := k.putBack(cont, l, int(vrf.Table)); err != nil {
		return k, alsoRelease(err, k.release(cont, l))
	}
	return k, nil
}

func alsoRelease(err, rerr error) error {
	if rerr == nil {
		return err
	}
	return fmt.Errorf("%w (and taking it out of the vrf again failed: %v)", err, rerr)
}

// save lists l's global IPv6 addresses and the routes through it (main
// table) that the kernel did not make itself (those it makes again).
func save(cont *link.NS, l netlink.Link) (*kept, error) {
	addrs, err := cont.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return nil, fmt.Errorf("list addresses of %q: %w", l.Attrs().Name, err)
	}
	k := &kept{table: unix.RT_TABLE_MAIN}
	for _, a := range addrs {
		if a.Scope == int(netlink.SCOPE_UNIVERSE) {
			k.addrs = append(k.addrs, a)
		}
	}
	routes, err := cont.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes of %q: %w", l.Attrs().Name, err)
	}
	for _, r := range routes {
		if r.Protocol != unix.RTPROT_KERNEL {
			k.routes = append(k.routes, r)
		}
	}
	// On-link routes first: routes via a gateway need them (ptp's
	// gateway /32, scope link). The reference moves only scope-universe
	// routes, so a ptp interface's routes cannot follow it into a VRF.
	sort.SliceStable(k.routes, func(i, j int) bool { return k.routes[i].Scope > k.routes[j].Scope })
	return k, nil
}

// putBack re-adds the addresses l lost and the routes into table.
func (k *kept) putBack(cont *link.NS, l netlink.Link, table int) error {
	now, err := cont.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return fmt.Errorf("list addresses of %q: %w", l.Attrs().Name, err)
	}
	have := map[netip.Prefix]bool{}
	for _, a := range now {
		have[link.Prefix(a.IPNet)] = true
	}
	for _, a := range k.addrs {
		if have[link.Prefix(a.IPNet)] {
			continue
		}
		na := &netlink.Addr{IPNet: a.IPNet, Flags: a.Flags&^(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED|unix.IFA_F_OPTIMISTIC) | unix.IFA_F_NODAD}
		if err := cont.H.AddrAdd(l, na); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("re-add address %s to %q: %w", a.IPNet, l.Attrs().Name, err)
		}
	}
	for _, r := range k.routes {
		r.Table = table
		if err := cont.H.RouteReplace(&r); err != nil {
			return fmt.Errorf("move route %s to table %d: %w", r.Dst, table, err)
		}
	}
	return nil
}

// release takes l out of its VRF and puts its addresses and routes back
// where they were (a failed ADD's undo).
func (k *kept) release(cont *link.NS, l netlink.Link) error {
	if err := cont.H.LinkSetNoMaster(l); err != nil && !link.IsNotFound(err) {
		return fmt.Errorf("take %q out of its vrf: %w", l.Attrs().Name, err)
	}
	return k.putBack(cont, l, k.table)
}

// annotate says in the result which table the moved routes are now in
// (1.1.0 results carry it; earlier versions drop it), so that CHECK of the
// interface plugin before vrf finds them there.
func annotate(res *spec.Result, moved []netlink.Route, table int) *spec.Result {
	for _, r := range res.Routes {
		if r.Table != nil {
			continue
		}
		for _, m := range moved {
			gw, _ := netip.AddrFromSlice(m.Gw)
			if sameDst(m.Dst, r.Dst) && (!r.GW.IsValid() || gw.Unmap() == r.GW) {
				r.Table = spec.IntPtr(table)
				break
			}
		}
	}
	return res
}

func sameDst(dst *net.IPNet, p netip.Prefix) bool {
	if link.IsDefaultDst(dst) {
		return p.Bits() == 0
	}
	return link.Prefix(dst).Masked() == p.Masked()
}

// delIfEmpty deletes vrf unless an interface is still in it.
func delIfEmpty(cont *link.NS, vrf *netlink.Vrf) error {
	links, err := cont.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		if l.Attrs().MasterIndex == vrf.Index {
			return nil
		}
	}
	if err := cont.H.LinkDel(vrf); err != nil && !link.IsNotFound(err) {
		return fmt.Errorf("delete vrf %q: %w", vrf.Name, err)
	}
	return nil
}

// del takes the interface out of the VRF and deletes the VRF when no
// interface is left in it. It needs no namespace and tolerates a missing
// VRF or interface (the interface plugin's DEL may have run, or the
// runtime repeats DEL).
func del(a *skel.CmdArgs) error {
	c, err := decode(a)
	if err != nil {
		return err
	}
	cont, err := link.OpenIfExists(a.Netns)
	if cont == nil || c.VRFName == "" {
		return err
	}
	defer cont.Close()
	l, err := cont.FindLink(c.VRFName)
	if err != nil {
		return err
	}
	vrf, ok := l.(*netlink.Vrf)
	if !ok {
		return nil // none (or not ours to touch)
	}
	il, err := cont.FindLink(a.IfName)
	if err != nil {
		return err
	}
	if il != nil && il.Attrs().MasterIndex == vrf.Index {
		if err := cont.H.LinkSetNoMaster(il); err != nil && !link.IsNotFound(err) {
			return fmt.Errorf("take %q out of vrf %q: %w", a.IfName, c.VRFName, err)
		}
	}
	return delIfEmpty(cont, vrf)
}

// check verifies the VRF (a vrf, up, with the configured table), that the
// interface is in it with prevResult's addresses, and that prevResult's
// routes through the interface are in the VRF's table. (The reference
// checks only that the interface is in the VRF.)
func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	prev, err := a.CheckPrev("")
	if err != nil {
		return err
	}
	cont, err := link.OpenContainer(a.Netns)
	if err != nil {
		return err
	}
	defer cont.Close()
	vl, err := cont.FindLink(c.VRFName)
	if err != nil {
		return err
	}
	vrf, ok := vl.(*netlink.Vrf)
	switch {
	case vl == nil:
		return skel.CheckErr("vrf %q not found", c.VRFName)
	case !ok:
		return skel.CheckErr("%q is a %s, not a vrf", c.VRFName, vl.Type())
	case vrf.Flags&net.FlagUp == 0:
		return skel.CheckErr("vrf %q is down", c.VRFName)
	case c.Table != 0 && int64(vrf.Table) != c.Table:
		return skel.CheckErr("vrf %q uses table %d, config says %d", c.VRFName, vrf.Table, c.Table)
	}
	l, err := cont.LinkByName(a.IfName)
	if err != nil {
		return skel.CheckErr("interface %q not found: %v", a.IfName, err)
	}
	if l.Attrs().MasterIndex != vrf.Index {
		return skel.CheckErr("interface %q is not in vrf %q", a.IfName, c.VRFName)
	}
	idx := link.FindIface(prev, a.IfName, a.Netns)
	if idx < 0 {
		return nil // prevResult does not describe the interface: nothing more to compare
	}
	if err := cont.CheckAddrs(l, prev.IPs, idx); err != nil {
		return skel.CheckErr("%v", err)
	}
	if err := cont.CheckRoutes(routesVia(prev, idx, int(vrf.Table))); err != nil {
		return skel.CheckErr("%v", err)
	}
	return nil
}

// routesVia returns prevResult's routes that go through interface idx —
// those already placed in table, and those whose gateway is in one of the
// interface's subnets — as routes of table.
func routesVia(res *spec.Result, idx, table int) []*spec.Route {
	var out []*spec.Route
	for _, r := range res.Routes {
		mine := r.Table != nil && *r.Table == table
		for _, ipc := range res.IPs {
			if r.Table != nil || ipc.Interface == nil || *ipc.Interface != idx || ipc.Address.Addr().Is4() != r.Dst.Addr().Is4() {
				continue
			}
			// A route without a gateway goes via the interface's gateway
			// (as ConfigureIface adds it).
			if r.GW.IsValid() && ipc.Address.Masked().Contains(r.GW) || !r.GW.IsValid() && ipc.Gateway.IsValid() {
				mine = true
			}
		}
		if mine {
			rc := *r
			rc.Table = spec.IntPtr(table)
			out = append(out, &rc)
		}
	}
	return out
}
