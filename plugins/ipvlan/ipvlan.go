// Package ipvlan is the ipvlan plugin: it makes an ipvlan interface on a
// host ("master") interface straight inside the container, sharing the
// master's MAC address, and addresses it from IPAM or, chained, from the
// previous plugin's result.
package ipvlan

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/skel"
)

// Plugin returns the ipvlan plugin.
func Plugin() skel.Plugin { return def.Plugin() }

var def = ifplugin.Def[*Config]{
	Type:     "ipvlan",
	About:    "patchbay ipvlan plugin: an ipvlan interface on a host interface, inside the container",
	Load:     load,
	Describe: describe,
}

// Config is the ipvlan plugin's configuration; keys and defaults follow
// the reference ipvlan plugin v1.9.1.
type Config struct {
	ifplugin.Base
	Mode string `json:"mode"`

	mode netlink.IPVlanMode
}

// modes maps the "mode" key to the kernel's ipvlan modes; "" is l2.
var modes = ifplugin.Modes[netlink.IPVlanMode]{
	"":    netlink.IPVLAN_MODE_L2,
	"l2":  netlink.IPVLAN_MODE_L2,
	"l3":  netlink.IPVLAN_MODE_L3,
	"l3s": netlink.IPVLAN_MODE_L3S,
}

func load(a *skel.CmdArgs) (*Config, error) {
	c := &Config{}
	if err := a.DecodeConf(c); err != nil {
		return nil, err
	}
	m, err := modes.Parse("ipvlan", c.Mode)
	if err != nil {
		return nil, err
	}
	c.mode = m
	return c, nil
}

// describe is the ipvlan interface c makes.
func describe(c *Config) (*ifplugin.Kind, ifplugin.Conf) {
	k := &ifplugin.Kind{Type: "ipvlan", Master: ifplugin.MasterOrPrevOrDefaultRoute, Addrs: ifplugin.IPAMOrPrevResult, Notify: true}
	k.New = func(netlink.Link) netlink.Link { return &netlink.IPVlan{Mode: c.mode} }
	k.Verify = func(l netlink.Link) error {
		if m := l.(*netlink.IPVlan).Mode; m != c.mode {
			return fmt.Errorf("mode is %s, config says %s", modes.Name(m), modes.Name(c.mode))
		}
		return nil
	}
	return k, c.Conf()
}
