// Package link is the interface plugins' one way into a network namespace
// and the link, address, route and sysctl work they share. Nothing here
// execs a tool.
//
// A namespace is an NS: one route-netlink handle, opened once per
// invocation (Current for the plugin's own, "host" namespace; OpenContainer
// for CNI_NETNS on ADD and CHECK, where a vanished namespace is code 3;
// OpenIfExists on DEL, where an empty or vanished one is nothing to do).
// OpenPair, OpenPairIfExists and OpenForAdd (which also refuses a taken
// CNI_IFNAME) open both at once and return one function closing both.
// Its lookups retry dumps the kernel interrupted (EINTR, NLM_F_DUMP_INTR);
// NS.Do runs code on a thread inside it, for /proc/sys.
//
// An ADD pushes onto an Undo the step that reverses each change right
// after making it, and a deferred Unwind takes them back, newest first,
// when the ADD fails. A macvlan-like plugin:
//
//	func add(a *skel.CmdArgs) (res *spec.Result, err error) {
//		host, cont, done, err := link.OpenForAdd(a.Netns, a.IfName) // refuses a taken name
//		...
//		defer done()
//		var undo link.Undo
//		defer undo.Unwind(&err)
//		master, err := host.DefaultRouteLink() // no "master" key
//		...
//		mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{ParentIndex: master.Attrs().Index, MTU: c.MTU}, Mode: mode}
//		l, err := host.AddLinkIn(cont, mv, a.IfName) // temporary name, renamed inside
//		...
//		undo.Push("delete "+a.IfName, func() error { _, err := cont.DelLink(a.IfName); return err })
//		ipam, err := skel.DelegateAdd(a, c.IPAM.Type)
//		...
//		undo.Push("release the IPAM allocation", func() error { return skel.DelegateVerb(a, spec.CmdDel, c.IPAM.Type) })
//		// res: the interface (index 0) from l, IPs and routes from ipam ...
//		if err = cont.ConfigureIface(l, res, 0, link.IfaceOpts{ARPNotify: true}); err != nil {
//			return nil, err
//		}
//		return res, nil
//	}
//
// (Example in example_test.go is the same ADD, compiled.)
//
// CHECK finds its interface in prevResult (FindIface), then verifies it
// (CheckLink: type, MAC, MTU, up) and the result's addresses and routes
// (CheckResult). DEL calls DelContainerLink (or OpenIfExists and DelLink),
// which tolerate a missing namespace and a missing link. host-device
// moves an existing link with MoveLink, into the container and back.
package link
