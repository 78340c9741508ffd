// Package bandwidth is the bandwidth meta plugin: in a chain after a plugin
// that makes a veth pair (bridge, ptp), it shapes the container's traffic
// with token bucket filters on the host side. Ingress (into the container)
// goes through a tbf on the host veth; egress (out of the container) is
// redirected from the host veth's ingress to an ifb device that carries a
// tbf. Keys, units and device names follow the reference bandwidth plugin
// v1.9.1; see the package README for the differences.
package bandwidth

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the bandwidth plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "bandwidth",
		Add:    add,
		Del:    del,
		Check:  check,
		GC:     gc,
		Status: func(*skel.CmdArgs) error { return nil }, // nothing to wait for
		About:  "patchbay bandwidth plugin: shapes a container's traffic with tbf on its host veth and an ifb device",
	}
}

var (
	rootHandle    = netlink.MakeHandle(1, 0)
	ingressHandle = netlink.MakeHandle(0xffff, 0)
)

func add(a *skel.CmdArgs) (res *spec.Result, err error) {
	c, err := load(a)
	if err != nil {
		return nil, err
	}
	prev := a.Conf.PrevResult
	if !c.shaped() {
		if prev == nil {
			return &spec.Result{}, nil
		}
		return prev, nil // nothing to shape: no kernel work at all
	}
	if prev == nil {
		return nil, invalid("\"prevResult\" is required: bandwidth is a chained plugin and must follow a plugin that makes a veth pair (bridge, ptp)")
	}
	host, cont, done, err := link.OpenPair(a.Netns)
	if err != nil {
		return nil, err
	}
	defer done()
	hostIf, err := hostPeer(host, cont, a.IfName, prev)
	if err != nil {
		return nil, err
	}

	res = prev.Clone()
	var undo link.Undo
	defer undo.Unwind(&err)
	if c.ingress != nil {
		if err = ensureTbf(host, hostIf, c.ingress, &undo); err != nil {
			return nil, err
		}
	}
	if c.egress != nil {
		ifb, err := ensureIfb(host, c.name, a.IfName, ifbName(c.name, a.ContainerID), hostIf.Attrs().MTU, &undo)
		if err != nil {
			return nil, err
		}
		if err = ensureTbf(host, ifb, c.egress, &undo); err != nil {
			return nil, err
		}
		if err = ensureRedirect(host, hostIf, ifb, &undo); err != nil {
			return nil, err
		}
		if link.FindIface(res, ifb.Attrs().Name, "") < 0 {
			res.Interfaces = append(res.Interfaces, &spec.Interface{Name: ifb.Attrs().Name, Mac: ifb.Attrs().HardwareAddr.String()})
		}
	}
	for _, s := range []*shape{c.ingress, c.egress} {
		if s != nil && int64(s.burst) < int64(hostIf.Attrs().MTU) {
			a.Log.Warn("burst is smaller than the host interface's MTU: the kernel drops packets larger than the burst",
				"key", s.burstKey, "burstBytes", s.burst, "interface", hostIf.Attrs().Name, "mtu", hostIf.Attrs().MTU)
		}
	}
	return res, nil
}

// hostPeer finds the host end of the container's veth CNI_IFNAME: the link
// in the host namespace whose peer it is. When prevResult lists
// interfaces, the host end must be among them (as in the reference).
func hostPeer(host, cont *link.NS, ifName string, prev *spec.Result) (netlink.Link, error) {
	cl, err := cont.FindLink(ifName)
	if err != nil {
		return nil, fmt.Errorf("look up %q in %s: %w", ifName, cont, err)
	}
	if cl == nil {
		return nil, invalid("interface %q not found in %s: bandwidth must follow the plugin that creates it", ifName, cont)
	}
	if _, ok := cl.(*netlink.Veth); !ok {
		return nil, invalid("interface %q in %s is a %s: bandwidth shapes on the host end of a veth pair (bridge, ptp)", ifName, cont, cl.Type())
	}
	peer, err := link.PeerIndex(cl)
	if err != nil {
		return nil, invalid("interface %q in %s: %v", ifName, cont, err)
	}
	hl, err := host.LinkByIndex(peer)
	if err != nil && !link.IsNotFound(err) {
		return nil, fmt.Errorf("look up link %d in %s: %w", peer, host, err)
	}
	// An index is only unique in its namespace: the link found must be a
	// veth whose peer is the container's interface.
	if hl == nil || hl.Type() != "veth" || hl.Attrs().ParentIndex != cl.Attrs().Index {
		return nil, invalid("the peer of %q in %s is not in the host namespace", ifName, cont)
	}
	if len(prev.Interfaces) > 0 && link.FindIface(prev, hl.Attrs().Name, "") < 0 {
		return nil, invalid("prevResult does not list %q, the host end of %q: bandwidth must follow the plugin that made this veth pair", hl.Attrs().Name, ifName)
	}
	return hl, nil
}

// rootQdisc returns l's root qdisc, nil for the kernel's default one
// (handle 0: noqueue, pfifo_fast, mq, ...).
func rootQdisc(host *link.NS, l netlink.Link) (netlink.Qdisc, error) {
	qs, err := host.QdiscList(l)
	if err != nil {
		return nil, fmt.Errorf("list qdiscs of %q: %w", l.Attrs().Name, err)
	}
	for _, q := range qs {
		if at := q.Attrs(); at.Parent == netlink.HANDLE_ROOT && at.Handle != 0 {
			return q, nil
		}
	}
	return nil, nil
}

// ensureTbf makes s the root tbf of l: created, or changed in place when a
// tbf 1: (an earlier ADD's) is there already. Another root qdisc is left
// alone and the ADD fails: it is not this plugin's. The common case, no
// root qdisc yet, is one request.
func ensureTbf(host *link.NS, l netlink.Link, s *shape, undo *link.Undo) error {
	name, idx := l.Attrs().Name, l.Attrs().Index
	t := s.tbf(idx)
	err := host.AddTbf(t)
	if err == nil {
		undo.Push("delete the root qdisc of "+name, func() error {
			return ignoreGone(host.H.QdiscDel(&netlink.Tbf{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: rootHandle, Parent: netlink.HANDLE_ROOT}}))
		})
		return nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("set tbf on %q (%s %d, %s %d): %w", name, s.rateKey, s.rateBits, s.burstKey, s.burstBits, err)
	}
	old, err := rootQdisc(host, l)
	if err != nil {
		return err
	}
	was, ok := old.(*netlink.Tbf)
	if !ok || was.Handle != rootHandle {
		what := "none"
		if old != nil {
			what = old.Type() + " " + netlink.HandleStr(old.Attrs().Handle)
		}
		return spec.Errorf(spec.ErrInternal, "%q already has a root qdisc (%s): not replacing it", name, what)
	}
	if err := host.ReplaceTbf(t); err != nil {
		return fmt.Errorf("set tbf on %q (%s %d, %s %d): %w", name, s.rateKey, s.rateBits, s.burstKey, s.burstBits, err)
	}
	undo.Push("put back the root qdisc of "+name, func() error {
		return host.ReplaceTbf(link.Tbf{LinkIndex: idx, Rate: was.Rate, Limit: was.Limit, Buffer: was.Buffer})
	})
	return nil
}

// ensureIfb returns the attachment's ifb device, up, creating it (with the
// host veth's MTU and txqueuelen 0, as the reference does) when missing.
// The MAC is chosen here, so that the new device need not be read back.
func ensureIfb(host *link.NS, network, ifName, name string, mtu int, undo *link.Undo) (netlink.Link, error) {
	ifb := &netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: name, Flags: net.FlagUp, MTU: mtu, TxQLen: 0, HardwareAddr: link.RandomMAC()}}
	err := host.H.LinkAdd(ifb)
	if errors.Is(err, unix.EEXIST) {
		return existingIfb(host, network, ifName, name)
	}
	if err != nil {
		return nil, fmt.Errorf("create ifb device %q: %w", name, err)
	}
	undo.Push("delete "+name, func() error { _, err := host.DelLink(name); return err })
	if ifb.Index == 0 {
		return nil, fmt.Errorf("the new ifb device %q has no index", name)
	}
	// The kernel ignores IFLA_IFALIAS in a link's creation request.
	if err := host.H.LinkSetAlias(ifb, ifbAlias(network, ifName)); err != nil {
		return nil, fmt.Errorf("set the alias of %q: %w", name, err)
	}
	return ifb, nil
}

// existingIfb takes over an ifb device an earlier ADD of this attachment
// made (or the reference's, which names devices the same way).
func existingIfb(host *link.NS, network, ifName, name string) (netlink.Link, error) {
	l, err := host.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("look up %q: %w", name, err)
	}
	if l.Type() != "ifb" {
		return nil, spec.Errorf(spec.ErrInternal, "%q exists and is a %s, not an ifb device", name, l.Type())
	}
	if why := ownerMismatch(l.Attrs().Alias, network, ifName); why != "" {
		return nil, spec.Errorf(spec.ErrInternal, "ifb device %q exists and is not this attachment's: %s", name, why)
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := host.H.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set %q up: %w", name, err)
		}
	}
	return l, nil
}

// ensureRedirect sends everything the container sends (the host veth's
// ingress) to the ifb device: an ingress qdisc with a u32 match-all filter
// whose action redirects to the ifb.
func ensureRedirect(host *link.NS, hostIf, ifb netlink.Link, undo *link.Undo) error {
	name := hostIf.Attrs().Name
	ing := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: hostIf.Attrs().Index, Handle: ingressHandle, Parent: netlink.HANDLE_INGRESS}}
	switch err := host.H.QdiscAdd(ing); {
	case err == nil:
		undo.Push("delete the ingress qdisc of "+name, func() error { return ignoreGone(host.H.QdiscDel(ing)) })
	case errors.Is(err, unix.EEXIST):
		// An earlier ADD's, or another tool's: keep it, add our filter
		// unless it is there.
		fs, err := redirects(host, hostIf)
		if err != nil {
			return err
		}
		for _, f := range fs {
			if f.to == ifb.Attrs().Index {
				return nil
			}
		}
	default:
		return fmt.Errorf("add an ingress qdisc to %q: %w", name, err)
	}
	u32 := redirectFilter(hostIf.Attrs().Index, ifb.Attrs().Index)
	if err := host.H.FilterAdd(u32); err != nil {
		return fmt.Errorf("add the filter redirecting %q to %q: %w", name, ifb.Attrs().Name, err)
	}
	undo.Push("delete the redirect filter of "+name, func() error { return delRedirects(host, hostIf, ifb.Attrs().Index) })
	return nil
}

// delRedirects deletes l's ingress filters that redirect to the device
// with index to (by their handles: other filters stay).
func delRedirects(host *link.NS, l netlink.Link, to int) error {
	fs, err := redirects(host, l)
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range fs {
		if f.to == to {
			errs = append(errs, ignoreGone(host.H.FilterDel(f.filter)))
		}
	}
	return errors.Join(errs...)
}

// redirectFilter matches every packet and redirects it to the ifb (the
// reference's filter: priority 1, flowid 1:1).
func redirectFilter(from, to int) *netlink.U32 {
	return &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: from, Parent: ingressHandle, Priority: 1, Protocol: unix.ETH_P_ALL},
		ClassId:     netlink.MakeHandle(1, 1),
		Actions:     []netlink.Action{netlink.NewMirredAction(to)},
	}
}

// redirect is a u32 filter on a host veth's ingress that redirects to a
// device (to: its index, 0 when the device is gone).
type redirect struct {
	filter *netlink.U32
	to     int
}

// redirects lists the u32 filters under l's ingress qdisc whose action
// redirects packets out of another device.
func redirects(host *link.NS, l netlink.Link) ([]redirect, error) {
	fs, err := host.FilterList(l, ingressHandle)
	if err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil, nil // no ingress qdisc
		}
		return nil, fmt.Errorf("list the ingress filters of %q: %w", l.Attrs().Name, err)
	}
	var out []redirect
	for _, f := range fs {
		u, ok := f.(*netlink.U32)
		if !ok {
			continue
		}
		for _, act := range u.Actions {
			if m, ok := act.(*netlink.MirredAction); ok && m.MirredAction == netlink.TCA_EGRESS_REDIR {
				out = append(out, redirect{filter: u, to: int(m.Ifindex)})
				break
			}
		}
	}
	return out, nil
}

func ignoreGone(err error) error {
	if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) || link.IsNotFound(err) {
		return nil
	}
	return err
}
