package link_test

import (
	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// An interface plugin's ADD on this package: a macvlan on the default
// route's link, made straight into the container, addressed from IPAM,
// and undone if anything fails. (Compiled, not run: it is the shape the
// package doc describes.)
func Example() {
	add := func(a *skel.CmdArgs, ipamType string, mtu int) (res *spec.Result, err error) {
		host, cont, done, err := link.OpenForAdd(a.Netns, a.IfName)
		if err != nil {
			return nil, err
		}
		defer done()
		var undo link.Undo
		defer undo.Unwind(&err)

		master, err := host.DefaultRouteLink()
		if err != nil {
			return nil, err
		}
		mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{ParentIndex: master.Attrs().Index, MTU: mtu}, Mode: netlink.MACVLAN_MODE_BRIDGE}
		l, err := host.AddLinkIn(cont, mv, a.IfName)
		if err != nil {
			return nil, err
		}
		undo.Push("delete "+a.IfName, func() error { _, err := cont.DelLink(a.IfName); return err })

		res, err = skel.DelegateAdd(a, ipamType)
		if err != nil {
			return nil, err
		}
		undo.Push("release the IPAM allocation", func() error { return skel.DelegateVerb(a, spec.CmdDel, ipamType) })
		res.Interfaces = []*spec.Interface{{Name: a.IfName, Mac: l.Attrs().HardwareAddr.String(), Sandbox: a.Netns}}
		for _, ipc := range res.IPs {
			ipc.Interface = spec.IntPtr(0)
		}
		if err = cont.ConfigureIface(l, res, 0, link.IfaceOpts{ARPNotify: true}); err != nil {
			return nil, err
		}
		return res, nil
	}
	_ = add
}
