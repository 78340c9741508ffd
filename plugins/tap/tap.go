// Package tap is the tap plugin: it creates a persistent tap device inside
// the container (for a VM or a userspace network stack to attach to),
// optionally owned by a user and group, multi-queue, on a bridge of the
// container's namespace, and addresses it from IPAM.
package tap

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the tap plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "tap",
		Add:    add,
		Del:    del,
		Check:  check,
		GC:     gc,
		Status: status,
		About:  "patchbay tap plugin: a tap device inside the container",
	}
}

func add(a *skel.CmdArgs) (res *spec.Result, err error) {
	c, err := load(a)
	if err != nil {
		return nil, err
	}
	cont, err := link.OpenContainer(a.Netns)
	if err != nil {
		return nil, err
	}
	defer cont.Close()
	if err := cont.CheckNameFree(a.IfName); err != nil {
		return nil, err
	}
	var br netlink.Link
	if c.Bridge != "" {
		if br, err = cont.FindLink(c.Bridge); err == nil && br == nil {
			err = invalid("\"bridge\" value %q: no such interface in %s", c.Bridge, cont)
		}
		if err != nil {
			return nil, err
		}
	}

	// From here on a failure removes what this ADD made.
	var undo link.Undo
	defer undo.Unwind(&err)
	if err = createTap(cont, c, a.IfName); err != nil {
		return nil, err
	}
	undo.Push("delete "+a.IfName, func() error { _, err := cont.DelLink(a.IfName); return err })
	l, err := cont.LinkByName(a.IfName)
	if err != nil {
		return nil, fmt.Errorf("find the new tap %q: %w", a.IfName, err)
	}
	if c.MTU != 0 {
		if err = cont.H.LinkSetMTU(l, c.MTU); err != nil {
			return nil, fmt.Errorf("set the MTU of %q to %d: %w", a.IfName, c.MTU, err)
		}
	}
	if c.mac != nil {
		if err = cont.H.LinkSetHardwareAddr(l, c.mac); err != nil {
			return nil, fmt.Errorf("set the MAC of %q to %s: %w", a.IfName, c.mac, err)
		}
	}
	if br != nil {
		if err = cont.H.LinkSetMasterByIndex(l, br.Attrs().Index); err != nil {
			return nil, fmt.Errorf("attach %q to bridge %q: %w", a.IfName, c.Bridge, err)
		}
	}
	if l, err = cont.LinkByName(a.IfName); err != nil { // the MAC as it is now
		return nil, fmt.Errorf("find tap %q: %w", a.IfName, err)
	}
	res = &spec.Result{Interfaces: []*spec.Interface{{Name: a.IfName, Mac: l.Attrs().HardwareAddr.String(), Sandbox: a.Netns}}}

	if c.IPAM.Type == "" {
		if err = cont.H.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set %q up: %w", a.IfName, err)
		}
		return ifplugin.WithDNS(res, c.DNS), nil
	}
	if err = ifplugin.IPAMAdd(a, c.IPAM.Type, res, 0, &undo); err != nil {
		return nil, err
	}
	if err = cont.ConfigureIface(l, res, 0, link.IfaceOpts{ARPNotify: true}); err != nil {
		return nil, err
	}
	return ifplugin.WithDNS(res, c.DNS), nil
}

// del releases the IPAM allocation first (a DHCP lease is released over
// the interface), then deletes the tap. Only a tun/tap device is deleted:
// after an ADD refused because CNI_IFNAME was taken, the runtime's DEL
// must leave the container's own interface alone.
func del(a *skel.CmdArgs) error {
	c, err := decode(a)
	if err != nil {
		return err
	}
	if err := skel.DelegateIPAM(a, spec.CmdDel, c.IPAM.Type); err != nil {
		return err
	}
	cont, err := link.OpenIfExists(a.Netns)
	if cont == nil {
		return err
	}
	defer cont.Close()
	l, err := cont.FindLink(a.IfName)
	if l == nil || err != nil {
		return err
	}
	if _, ok := l.(*netlink.Tuntap); !ok {
		return nil
	}
	if err := cont.H.LinkDel(l); err != nil && !link.IsNotFound(err) {
		return fmt.Errorf("delete %q: %w", a.IfName, err)
	}
	return nil
}

// check verifies the tap against the configuration and prevResult: a tap
// (not tun) device, up, with prevResult's MAC, the configured MTU, owner,
// group, multi-queue and bridge, and prevResult's addresses and routes.
func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	prev, idx, err := ifplugin.CheckStart(a, c.IPAM.Type)
	if err != nil {
		return err
	}
	cont, err := link.OpenContainer(a.Netns)
	if err != nil {
		return err
	}
	defer cont.Close()
	l, err := cont.CheckLink(a.IfName, link.LinkWant{Type: "tuntap", MAC: prev.Interfaces[idx].Mac, MTU: c.MTU, Up: true})
	if err != nil {
		return skel.CheckErr("%v", err)
	}
	t := l.(*netlink.Tuntap)
	switch {
	case t.Mode != netlink.TUNTAP_MODE_TAP:
		return skel.CheckErr("%q is a tun device, not a tap", a.IfName)
	case (t.Flags&netlink.TUNTAP_MULTI_QUEUE != 0) != c.MultiQueue:
		return skel.CheckErr("%q multi-queue is %v, config says %v", a.IfName, t.Flags&netlink.TUNTAP_MULTI_QUEUE != 0, c.MultiQueue)
	case c.Owner != nil && int64(t.Owner) != *c.Owner:
		return skel.CheckErr("%q is owned by uid %d, config says %d", a.IfName, t.Owner, *c.Owner)
	case c.Group != nil && int64(t.Group) != *c.Group:
		return skel.CheckErr("%q has group %d, config says %d", a.IfName, t.Group, *c.Group)
	}
	if c.Bridge != "" {
		br, err := cont.FindLink(c.Bridge)
		if err != nil || br == nil || t.MasterIndex != br.Attrs().Index {
			return skel.CheckErr("%q is not a port of bridge %q", a.IfName, c.Bridge)
		}
	}
	if err := cont.CheckResult(l, prev, idx); err != nil {
		return skel.CheckErr("%v", err)
	}
	return nil
}

func status(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	return skel.DelegateIPAM(a, spec.CmdStatus, c.IPAM.Type)
}

// gc passes GC on to IPAM; the tap keeps no state of its own outside the
// container (its namespace takes the device with it).
func gc(a *skel.CmdArgs) error {
	c, err := decode(a)
	if err != nil {
		return err
	}
	return skel.DelegateIPAM(a, spec.CmdGC, c.IPAM.Type)
}
