package bridge

import (
	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
)

// check verifies what ADD built against prevResult: the bridge, the
// container veth and its host peer on the bridge, the container's
// addresses and routes. IPAM's CHECK runs first, as in the reference.
func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	prev, contIdx, err := ifplugin.CheckStart(a, c.IPAM.Type)
	if err != nil {
		return err
	}
	brIdx := link.FindIface(prev, c.Bridge, "")
	if brIdx < 0 {
		return skel.CheckErr("prevResult has no interface for bridge %q", c.Bridge)
	}
	brIf := prev.Interfaces[brIdx]

	host, cont, done, err := link.OpenPair(a.Netns)
	if err != nil {
		return err
	}
	defer done()

	bl, err := host.LinkByName(c.Bridge)
	if err != nil {
		return skel.CheckErr("bridge %q not found: %v", c.Bridge, err)
	}
	br, ok := bl.(*netlink.Bridge)
	if !ok {
		return skel.CheckErr("%q is not a bridge", c.Bridge)
	}
	if brIf.Mac != "" && brIf.Mac != br.HardwareAddr.String() {
		return skel.CheckErr("bridge %q MAC is %s, prevResult says %s", c.Bridge, br.HardwareAddr, brIf.Mac)
	}
	if (br.Promisc != 0) != c.PromiscMode {
		return skel.CheckErr("bridge %q promiscuous mode is %v, config says %v", c.Bridge, br.Promisc != 0, c.PromiscMode)
	}

	cl, err := cont.CheckLink(a.IfName, link.LinkWant{Type: "veth", MAC: prev.Interfaces[contIdx].Mac})
	if err != nil {
		return skel.CheckErr("%v", err)
	}
	peer, err := link.PeerIndex(cl)
	if err != nil {
		return skel.CheckErr("container interface %q: %v", a.IfName, err)
	}
	hl, err := host.LinkByIndex(peer)
	if err != nil {
		return skel.CheckErr("host end of %q (index %d) not found: %v", a.IfName, peer, err)
	}
	if hl.Attrs().MasterIndex != br.Index {
		return skel.CheckErr("host veth %q is not attached to bridge %q", hl.Attrs().Name, c.Bridge)
	}
	listed := false
	for _, in := range prev.Interfaces {
		if in.Name == hl.Attrs().Name && in.Sandbox == "" {
			listed = true
			if in.Mac != "" && in.Mac != hl.Attrs().HardwareAddr.String() {
				return skel.CheckErr("host veth %q MAC is %s, prevResult says %s", in.Name, hl.Attrs().HardwareAddr, in.Mac)
			}
		}
	}
	if !listed {
		return skel.CheckErr("host veth %q of %q is not in prevResult", hl.Attrs().Name, a.IfName)
	}
	if err := checkVlans(host, br, hl, c); err != nil {
		return skel.CheckErr("%v", err)
	}

	if err := cont.CheckResult(cl, prev, contIdx); err != nil {
		return skel.CheckErr("%v", err)
	}
	return nil
}
