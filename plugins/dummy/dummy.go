// Package dummy is the dummy plugin: it makes a dummy interface (a
// device that drops whatever is sent to it) inside the container and
// addresses it from IPAM, e.g. to hold an address the container answers
// on through another interface.
package dummy

import (
	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/skel"
)

// Plugin returns the dummy plugin.
func Plugin() skel.Plugin { return def.Plugin() }

// The reference dummy plugin v1.9.1 reads only the common keys (ipam,
// dns); so does this one.
var def = ifplugin.Def[ifplugin.Conf]{
	Type:  "dummy",
	About: "patchbay dummy plugin: a dummy interface inside the container, addressed from IPAM",
	Load: func(a *skel.CmdArgs) (ifplugin.Conf, error) {
		return ifplugin.Conf{IPAM: a.Conf.IPAM.Type, DNS: a.Conf.DNS}, nil
	},
	Describe: func(c ifplugin.Conf) (*ifplugin.Kind, ifplugin.Conf) { return kind, c },
}

var kind = &ifplugin.Kind{Type: "dummy", Master: ifplugin.NoMaster, Addrs: ifplugin.IPAMRequired,
	New: func(netlink.Link) netlink.Link { return &netlink.Dummy{} }}
