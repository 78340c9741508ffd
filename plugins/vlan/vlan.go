// Package vlan is the vlan plugin: it makes an 802.1Q VLAN interface on a
// host ("master") interface straight inside the container and addresses
// it from IPAM.
package vlan

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/skel"
)

// Plugin returns the vlan plugin.
func Plugin() skel.Plugin { return def.Plugin() }

var def = ifplugin.Def[*Config]{
	Type:     "vlan",
	About:    "patchbay vlan plugin: an 802.1Q VLAN interface on a host interface, inside the container",
	Load:     load,
	Describe: describe,
}

// Config is the vlan plugin's configuration; keys and defaults follow the
// reference vlan plugin v1.9.1.
type Config struct {
	ifplugin.Base
	VlanID int `json:"vlanId"`
}

func load(a *skel.CmdArgs) (*Config, error) {
	c := &Config{}
	if err := a.DecodeConf(c); err != nil {
		return nil, err
	}
	if c.VlanID < 0 || c.VlanID > 4094 {
		return nil, ifplugin.Invalid("\"vlanId\" value %d is invalid: must be between 0 and 4094", c.VlanID)
	}
	return c, nil
}

// describe is the VLAN interface c makes.
func describe(c *Config) (*ifplugin.Kind, ifplugin.Conf) {
	k := &ifplugin.Kind{Type: "vlan", Master: ifplugin.MasterRequired, Addrs: ifplugin.IPAMRequired}
	k.New = func(netlink.Link) netlink.Link { return &netlink.Vlan{VlanId: c.VlanID} }
	k.Verify = func(l netlink.Link) error {
		v := l.(*netlink.Vlan)
		if v.VlanId != c.VlanID {
			return fmt.Errorf("VLAN id is %d, config says %d", v.VlanId, c.VlanID)
		}
		if v.VlanProtocol != netlink.VLAN_PROTOCOL_8021Q && v.VlanProtocol != netlink.VLAN_PROTOCOL_UNKNOWN {
			return fmt.Errorf("VLAN protocol is %s, not 802.1Q", v.VlanProtocol)
		}
		return nil
	}
	k.Explain = func(err error) error {
		if errors.Is(err, unix.EEXIST) {
			// The kernel allows one VLAN link per id and master, in any
			// namespace.
			return ifplugin.Invalid("\"vlanId\" %d is already in use on master %q (another VLAN link of that id exists, perhaps in another container): %v", c.VlanID, c.Master, err)
		}
		return fmt.Errorf("create the VLAN link: %w", err)
	}
	return k, c.Conf()
}
