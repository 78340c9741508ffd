package bridge

import (
	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// check verifies what ADD built against prevResult: the bridge, the
// container veth and its host peer on the bridge, the container's
// addresses and routes. IPAM's CHECK runs first, as in the reference.
func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	if c.IPAM.Type != "" {
		if err := skel.DelegateVerb(a, spec.CmdCheck, c.IPAM.Type); err != nil {
			return err
		}
	}
	prev := a.Conf.PrevResult
	if prev == nil {
		return invalid("CHECK requires \"prevResult\"")
	}
	brIdx, contIdx := link.FindIface(prev, c.Bridge, ""), link.FindIface(prev, a.IfName, a.Netns)
	if brIdx < 0 {
		return checkErr("prevResult has no interface for bridge %q", c.Bridge)
	}
	if contIdx < 0 {
		return checkErr("prevResult has no interface %q in sandbox %q", a.IfName, a.Netns)
	}
	brIf := prev.Interfaces[brIdx]

	host, cont, done, err := link.OpenPair(a.Netns)
	if err != nil {
		return err
	}
	defer done()

	bl, err := host.LinkByName(c.Bridge)
	if err != nil {
		return checkErr("bridge %q not found: %v", c.Bridge, err)
	}
	br, ok := bl.(*netlink.Bridge)
	if !ok {
		return checkErr("%q is not a bridge", c.Bridge)
	}
	if brIf.Mac != "" && brIf.Mac != br.HardwareAddr.String() {
		return checkErr("bridge %q MAC is %s, prevResult says %s", c.Bridge, br.HardwareAddr, brIf.Mac)
	}
	if (br.Promisc != 0) != c.PromiscMode {
		return checkErr("bridge %q promiscuous mode is %v, config says %v", c.Bridge, br.Promisc != 0, c.PromiscMode)
	}

	cl, err := cont.CheckLink(a.IfName, link.LinkWant{Type: "veth", MAC: prev.Interfaces[contIdx].Mac})
	if err != nil {
		return checkErr("%v", err)
	}
	peer, err := link.PeerIndex(cl)
	if err != nil {
		return checkErr("container interface %q: %v", a.IfName, err)
	}
	hl, err := host.LinkByIndex(peer)
	if err != nil {
		return checkErr("host end of %q (index %d) not found: %v", a.IfName, peer, err)
	}
	if hl.Attrs().MasterIndex != br.Index {
		return checkErr("host veth %q is not attached to bridge %q", hl.Attrs().Name, c.Bridge)
	}
	listed := false
	for _, in := range prev.Interfaces {
		if in.Name == hl.Attrs().Name && in.Sandbox == "" {
			listed = true
			if in.Mac != "" && in.Mac != hl.Attrs().HardwareAddr.String() {
				return checkErr("host veth %q MAC is %s, prevResult says %s", in.Name, hl.Attrs().HardwareAddr, in.Mac)
			}
		}
	}
	if !listed {
		return checkErr("host veth %q of %q is not in prevResult", hl.Attrs().Name, a.IfName)
	}
	if err := checkVlans(host, br, hl, c); err != nil {
		return checkErr("%v", err)
	}

	if err := cont.CheckResult(cl, prev, contIdx); err != nil {
		return checkErr("%v", err)
	}
	return nil
}

func checkErr(format string, a ...any) error {
	return spec.Errorf(spec.ErrInternal, format, a...)
}
