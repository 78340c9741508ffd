// Package dummy is the dummy plugin: it makes a dummy interface (a
// device that drops whatever is sent to it) inside the container and
// addresses it from IPAM, e.g. to hold an address the container answers
// on through another interface.
package dummy

import (
	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the dummy plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "dummy",
		Add:    add,
		Del:    kind.Del,
		Check:  check,
		GC:     ifplugin.GC,
		Status: status,
		About:  "patchbay dummy plugin: a dummy interface inside the container, addressed from IPAM",
	}
}

// The reference dummy plugin v1.9.1 reads only the common keys (ipam,
// dns); so does this one.
var kind = &ifplugin.Kind{Type: "dummy", Master: ifplugin.NoMaster, Addrs: ifplugin.IPAMRequired,
	New: func(netlink.Link) netlink.Link { return &netlink.Dummy{} }}

func conf(a *skel.CmdArgs) ifplugin.Conf {
	return ifplugin.Conf{IPAM: a.Conf.IPAM.Type, DNS: a.Conf.DNS}
}

func add(a *skel.CmdArgs) (*spec.Result, error) { return kind.Add(a, conf(a)) }
func check(a *skel.CmdArgs) error               { return kind.Check(a, conf(a)) }
func status(a *skel.CmdArgs) error              { return kind.Status(a, conf(a)) }
