package bandwidth

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// del removes the attachment's ifb device, whether or not the container
// still exists, and, while the container's veth is still there, the
// shaping on its host end (the root tbf and the redirect filter, which
// would otherwise drop every packet once the ifb is gone).
func del(a *skel.CmdArgs) error {
	network := a.Conf.Name
	name := ifbName(network, a.ContainerID)
	host, err := link.Current()
	if err != nil {
		return err
	}
	defer host.Close()
	ifb, err := host.FindLink(name)
	if err != nil {
		return fmt.Errorf("look up %q: %w", name, err)
	}
	if ifb != nil {
		if why := ownerMismatch(ifb.Attrs().Alias, network, a.IfName); ifb.Type() != "ifb" || why != "" {
			a.Log.Warn("leaving a device named like this attachment's ifb: not its own", "device", name, "type", ifb.Type(), "why", why)
			ifb = nil
		}
	}
	// Without an ifb and without shaping configured there is nothing on the
	// host veth either: skip the container namespace.
	c, cerr := load(a)
	if ifb != nil || cerr != nil || c.shaped() {
		if err := unshapeHostEnd(a, host, ifb); err != nil {
			return err
		}
	}
	if ifb != nil {
		if _, err := host.DelLink(name); err != nil {
			return err
		}
	}
	return nil
}

// unshapeHostEnd removes the tbf and the redirect to ifb (nil: to a device
// that is gone) from the host end of the container's veth, if both ends
// still exist.
func unshapeHostEnd(a *skel.CmdArgs, host *link.NS, ifb netlink.Link) error {
	cont, err := link.OpenIfExists(a.Netns)
	if err != nil || cont == nil {
		return err
	}
	defer cont.Close()
	hostIf, err := hostPeer(host, cont, a.IfName, &spec.Result{})
	if err != nil {
		a.Log.Debug("no host veth to unshape", "reason", err)
		return nil
	}
	name := hostIf.Attrs().Name
	fs, err := redirects(host, hostIf)
	if err != nil {
		return err
	}
	var errs []error
	left := len(fs)
	for _, f := range fs {
		mine := ifb != nil && f.to == ifb.Attrs().Index
		if !mine && ifb == nil {
			// A redirect to a device that no longer exists drops
			// everything: the remains of an earlier DEL or of a crash.
			_, err := host.LinkByIndex(f.to)
			mine = f.to == 0 || link.IsNotFound(err)
		}
		if mine {
			errs = append(errs, ignoreGone(host.H.FilterDel(f.filter)))
			left--
		}
	}
	if left == 0 && len(fs) > 0 {
		errs = append(errs, ignoreGone(host.H.QdiscDel(&netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: hostIf.Attrs().Index, Handle: ingressHandle, Parent: netlink.HANDLE_INGRESS}})))
	}
	root, err := rootQdisc(host, hostIf)
	if err != nil {
		return err
	}
	if t, ok := root.(*netlink.Tbf); ok && t.Handle == rootHandle {
		errs = append(errs, ignoreGone(host.H.QdiscDel(t)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the shaping of %q: %w", name, err)
	}
	return nil
}

// check verifies that the kernel holds exactly the configured shaping:
// the host veth's root tbf (ingress), the ifb device with its tbf and the
// redirect to it (egress), and nothing of it for an unshaped direction.
func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	prev, err := a.CheckPrev("")
	if err != nil {
		return err
	}
	host, cont, done, err := link.OpenPair(a.Netns)
	if err != nil {
		return err
	}
	defer done()
	hostIf, err := hostPeer(host, cont, a.IfName, prev)
	if err != nil {
		return err
	}
	root, err := rootQdisc(host, hostIf)
	if err != nil {
		return err
	}
	if err := matchTbf(hostIf.Attrs().Name, root, c.ingress); err != nil {
		return err
	}

	name := ifbName(c.name, a.ContainerID)
	ifb, err := host.FindLink(name)
	if err != nil {
		return fmt.Errorf("look up %q: %w", name, err)
	}
	if ifb != nil && (ifb.Type() != "ifb" || ownerMismatch(ifb.Attrs().Alias, c.name, a.IfName) != "") {
		ifb = nil // not this attachment's
	}
	rs, err := redirects(host, hostIf)
	if err != nil {
		return err
	}
	if c.egress == nil {
		if ifb != nil {
			return skel.CheckErr("ifb device %q exists, but no egress shaping is configured", name)
		}
		if len(rs) > 0 {
			return skel.CheckErr("%q redirects its ingress to device %d, but no egress shaping is configured", hostIf.Attrs().Name, rs[0].to)
		}
		return nil
	}
	if ifb == nil {
		return skel.CheckErr("ifb device %q for egress shaping not found", name)
	}
	if ifb.Attrs().Flags&net.FlagUp == 0 {
		return skel.CheckErr("ifb device %q is down", name)
	}
	if i := link.FindIface(prev, name, ""); len(prev.Interfaces) > 0 && i < 0 {
		return skel.CheckErr("prevResult does not list ifb device %q", name)
	} else if i >= 0 && prev.Interfaces[i].Mac != "" && prev.Interfaces[i].Mac != ifb.Attrs().HardwareAddr.String() {
		return skel.CheckErr("ifb device %q MAC is %s, prevResult says %s", name, ifb.Attrs().HardwareAddr, prev.Interfaces[i].Mac)
	}
	iroot, err := rootQdisc(host, ifb)
	if err != nil {
		return err
	}
	if err := matchTbf(name, iroot, c.egress); err != nil {
		return err
	}
	switch {
	case len(rs) == 0:
		return skel.CheckErr("%q does not redirect its ingress to %q", hostIf.Attrs().Name, name)
	case len(rs) > 1:
		return skel.CheckErr("%q has %d ingress redirect filters, expected one (to %q)", hostIf.Attrs().Name, len(rs), name)
	case rs[0].to != ifb.Attrs().Index:
		return skel.CheckErr("%q redirects its ingress to device %d, not to %q (%d)", hostIf.Attrs().Name, rs[0].to, name, ifb.Attrs().Index)
	}
	if f := rs[0].filter; f.Priority != 1 || f.Protocol != unix.ETH_P_ALL || f.Sel == nil || !matchesAll(f.Sel) {
		return skel.CheckErr("the filter redirecting %q to %q does not match every packet", hostIf.Attrs().Name, name)
	}
	return nil
}

// matchesAll reports whether a u32 selector matches every packet.
func matchesAll(sel *netlink.TcU32Sel) bool {
	for _, k := range sel.Keys {
		if k.Mask != 0 {
			return false
		}
	}
	return true
}

// matchTbf compares a link's root qdisc with the shape configured for it
// (nil: none of ours may be there).
func matchTbf(name string, root netlink.Qdisc, s *shape) error {
	t, ours := root.(*netlink.Tbf)
	ours = ours && t.Handle == rootHandle
	if s == nil {
		if ours {
			return skel.CheckErr("%q has a tbf (rate %d bytes/s), but no shaping is configured for it", name, t.Rate)
		}
		return nil
	}
	if !ours {
		what := "none"
		if root != nil {
			what = root.Type() + " " + netlink.HandleStr(root.Attrs().Handle)
		}
		return skel.CheckErr("%q has no tbf 1: as its root qdisc (%s), expected %s %d", name, what, s.rateKey, s.rateBits)
	}
	mismatch := func(what string, got, want uint64) error {
		return skel.CheckErr("%q tbf %s is %d, expected %d (from %s %d, %s %d)", name, what, got, want, s.rateKey, s.rateBits, s.burstKey, s.burstBits)
	}
	switch {
	case t.Rate != s.rate:
		return mismatch("rate (bytes/s)", t.Rate, s.rate)
	case t.Buffer != s.reportedBuffer():
		return mismatch("buffer (ticks)", uint64(t.Buffer), uint64(s.reportedBuffer()))
	case t.Limit != s.limit:
		return mismatch("limit (bytes)", uint64(t.Limit), uint64(s.limit))
	case t.Peakrate != 0:
		return skel.CheckErr("%q tbf has a peak rate (%d bytes/s), none is configured", name, t.Peakrate)
	}
	return nil
}

// gc deletes the ifb devices this plugin made for the network that belong
// to no valid attachment. Devices without our alias (made by the reference
// plugin, which names them the same way) cannot be told apart by network
// and are left to DEL.
func gc(a *skel.CmdArgs) error {
	network := a.Conf.Name
	valid := map[string]bool{}
	for _, at := range a.Conf.Attachments() {
		valid[ifbName(network, at.ContainerID)+" "+at.IfName] = true
	}
	host, err := link.Current()
	if err != nil {
		return err
	}
	defer host.Close()
	links, err := host.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	tag := networkTag(network)
	var errs []error
	for _, l := range links {
		name := l.Attrs().Name
		t, ifName, ok := parseAlias(l.Attrs().Alias)
		if l.Type() != "ifb" || !strings.HasPrefix(name, "bwp") || !ok || t != tag || valid[name+" "+ifName] {
			continue
		}
		a.Log.Info("GC: deleting an ifb device of no valid attachment", "device", name, "interface", ifName)
		if _, err := host.DelLink(name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return nil
}
