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
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the vlan plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "vlan",
		Add:    add,
		Del:    kind(nil).Del,
		Check:  check,
		GC:     ifplugin.GC,
		Status: status,
		About:  "patchbay vlan plugin: an 802.1Q VLAN interface on a host interface, inside the container",
	}
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
		return nil, ifplugin.Invalid("vlan: \"vlanId\" value %d is invalid: must be between 0 and 4094", c.VlanID)
	}
	return c, nil
}

// kind describes the VLAN interface of c (nil: for DEL).
func kind(c *Config) *ifplugin.Kind {
	k := &ifplugin.Kind{Type: "vlan", Master: ifplugin.MasterRequired, Addrs: ifplugin.IPAMRequired}
	if c == nil {
		return k
	}
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
	return k
}

func add(a *skel.CmdArgs) (*spec.Result, error) {
	c, err := load(a)
	if err != nil {
		return nil, err
	}
	res, err := kind(c).Add(a, c.Conf())
	if errors.Is(err, unix.EEXIST) {
		// The kernel allows one VLAN link per id and master, in any
		// namespace.
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "vlan: \"vlanId\" %d is already in use on master %q (another VLAN link of that id exists, perhaps in another container): %v", c.VlanID, c.Master, err)
	}
	return res, err
}

func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	return kind(c).Check(a, c.Conf())
}

func status(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	return kind(c).Status(a, c.Conf())
}
